/**
 * Content hashes of snapshots: FNV-1a 64 over a canonical JSON text.
 *
 * The hash only has to tell "same routing" from "different routing" (sidecars report the hash they
 * applied; the controller pushes only when it changes), so a fast non-cryptographic hash is
 * enough: a collision would need two snapshots of one pool that differ and hash alike, 2^-64 per
 * change. It lives in `crds/` because both sides compute it: the controller hashes what it
 * publishes, and a sidecar checks the endpoint list it built from an `endpoints` delta (issue 46);
 * `controller/` and `sidecar/` share only `crds/`.
 */

/**
 * JSON with object keys sorted (by UTF-16 code units, so the order never depends on a locale) and
 * `undefined` fields left out, as `JSON.stringify` leaves them out: equal data, equal text,
 * whatever order the fields were built in. Array order is kept: it is meaningful.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) {
    return `[${value.map((item: unknown) => (item === undefined ? 'null' : canonicalJson(item))).join(',')}]`;
  }
  if (typeof value === 'object' && value !== null) {
    const record = value as Record<string, unknown>;
    const fields = Object.keys(record)
      .filter((key) => record[key] !== undefined)
      .sort(compareStrings)
      .map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`);
    return `{${fields.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** Plain code-unit order: deterministic everywhere, unlike `localeCompare`. */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

const TWO_POW_32 = 4294967296;
/** The FNV 64 prime is 2^40 + 0x1b3: multiplying by it is (h · 0x1b3) + (h << 40). */
const PRIME_LOW = 0x1b3;

/**
 * FNV-1a 64 of the UTF-8 encoding of `text`, as 16 lower-case hex digits. Computed in two 32-bit
 * halves: doubles cannot multiply 64-bit integers exactly, and BigInt is far slower.
 */
export function fnv1a64Hex(text: string): string {
  let hi = 0xcbf29ce4;
  let lo = 0x84222325;
  for (const byte of new TextEncoder().encode(text)) {
    lo = (lo ^ byte) >>> 0;
    const loProduct = lo * PRIME_LOW; // < 2^41: exact in a double
    const carry = Math.floor(loProduct / TWO_POW_32);
    hi = (hi * PRIME_LOW + carry + ((lo << 8) >>> 0)) >>> 0;
    lo = loProduct >>> 0;
  }
  return hi.toString(16).padStart(8, '0') + lo.toString(16).padStart(8, '0');
}

/** The content hash of a value: FNV-1a 64 of its canonical JSON. */
export function contentHash(value: unknown): string {
  return fnv1a64Hex(canonicalJson(value));
}
