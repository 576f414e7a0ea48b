/**
 * Error shape and field paths shared by the validator, the semantic rules and the resolver.
 *
 * Paths are written the way the Kubernetes API server writes them (`spec.backends[1].url`), so an
 * error about a pool file reads the same as `kubectl apply` would report it for the resource.
 */

/** One problem with a pool document. `path` is never empty. */
export interface PoolError {
  /** Where the problem is, e.g. `spec.backends[1].url`; `<root>` for the document itself. */
  path: string;
  /** What is wrong, for a person, e.g. `must be a duration like 500ms, 5s, 10m or 1h30m: ...`. */
  message: string;
}

/** The path of the document itself. */
export const ROOT_PATH = '<root>';

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$-]*$/;

/** `joinPath('spec', 'backends')` → `spec.backends`; `joinPath('spec.backends', 1)` → `spec.backends[1]`. */
export function joinPath(base: string, key: string | number): string {
  if (typeof key === 'number') return `${base === ROOT_PATH ? '' : base}[${key}]`;
  if (!IDENTIFIER.test(key)) return `${base === ROOT_PATH ? '' : base}[${JSON.stringify(key)}]`;
  return base === '' || base === ROOT_PATH ? key : `${base}.${key}`;
}

/** `spec.backends[1]["odd key"].url` → `['spec', 'backends', 1, 'odd key', 'url']`. */
export function splitPath(path: string): (string | number)[] {
  if (path === ROOT_PATH) return [];
  const out: (string | number)[] = [];
  const token = /\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|\.?([^.[]+)/gy;
  for (let m = token.exec(path); m !== null && m[0] !== ''; m = token.exec(path)) {
    if (m[1] !== undefined) out.push(Number(m[1]));
    else if (m[2] !== undefined) out.push(String(JSON.parse(m[2])));
    else if (m[3] !== undefined) out.push(m[3]);
  }
  return out;
}

/** A plain object (not null, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Own, enumerable property (so `constructor` or `__proto__` from the prototype never count). */
export function hasOwn(value: Record<string, unknown>, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(value, key);
}

/** A field that is set: present and not null (the API server prunes nulls before validating). */
export function isSet(value: Record<string, unknown>, key: string): boolean {
  return hasOwn(value, key) && value[key] !== undefined && value[key] !== null;
}
