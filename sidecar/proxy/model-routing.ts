/**
 * Routing by the request's model across the pools a sidecar follows (docs/sidecar.md, "Several
 * pools"): which pool takes a request, which name it is sent with (a pool's aliases), the 404 of a
 * model no pool serves, and the `/v1/models` list of every pool's models. Pure: the proxy reads
 * the body and the pools, this decides.
 *
 * Also the multipart side of it: audio uploads carry `model` as a form field, read and rewritten
 * here on the whole body (the proxy buffers such a body only when routing needs its model).
 */
import type { ModelsServed } from '../policy/index.ts';

/** What one pool says about models, as far as routing goes. */
export interface PoolModels {
  readonly name: string;
  /** The pool's `spec.models`: names it declares (and refuses any other); empty = any. */
  readonly declared: readonly string[];
  /** The pool's `spec.aliases`: a request for `name` is sent as `model`. */
  readonly aliases: readonly { readonly name: string; readonly model: string }[];
  /** What its endpoints serve, declared per backend or discovered (`Balancer.modelsServed()`). */
  readonly served: ModelsServed;
}

/** Where a request goes, or why nowhere. */
export type PoolChoice =
  /**
   * Pool `index` takes it. `resolved`: the model it is sent with (an alias resolved; undefined
   * for a request that names none); `aliased`: `resolved` differs from the name the client sent.
   */
  | {
      readonly kind: 'pool';
      readonly index: number;
      readonly resolved: string | undefined;
      readonly aliased: boolean;
    }
  /** The pool the request needs has no configuration yet (503, as for a single pool). */
  | { readonly kind: 'not-configured'; readonly index: number }
  /** No pool serves the model: 404 `model_not_found`, listing `served` (sorted). */
  | { readonly kind: 'not-found'; readonly served: readonly string[] };

/** Whether `pool` knows `model`: an alias name of it, declared by it, or served by an endpoint. */
export function knowsModel(pool: PoolModels, model: string): boolean {
  return (
    pool.aliases.some((a) => a.name === model) ||
    pool.declared.includes(model) ||
    pool.served.models.has(model)
  );
}

/**
 * Whether `pool` may serve a model it does not know: it declares no list, and some endpoint's
 * list is not known yet (not declared, not discovered), so anything may be there.
 */
export function mayServe(pool: PoolModels): boolean {
  return pool.declared.length === 0 && pool.served.unknownEndpoints > 0;
}

/**
 * Which pool takes a request naming `model` (undefined: the body names none, or was not read).
 * `pools` in order, undefined for a pool with no configuration yet. The first configured pool
 * that knows the model takes it; while a pool has no configuration, a model no configured pool
 * knows waits for it (503: it may be that pool's); then the first pool that may serve it; else
 * 404. No model: the first pool, as a single-pool sidecar sends everything there.
 */
export function choosePool(
  model: string | undefined,
  pools: readonly (PoolModels | undefined)[],
): PoolChoice {
  if (model === undefined) {
    return pools[0] === undefined
      ? { kind: 'not-configured', index: 0 }
      : { kind: 'pool', index: 0, resolved: undefined, aliased: false };
  }
  const knower = pools.findIndex((p) => p !== undefined && knowsModel(p, model));
  if (knower !== -1) return inPool(knower, pools[knower]!, model);
  const waiting = pools.findIndex((p) => p === undefined);
  if (waiting !== -1) return { kind: 'not-configured', index: waiting };
  const open = pools.findIndex((p) => p !== undefined && mayServe(p));
  if (open !== -1) return inPool(open, pools[open]!, model);
  // Sorted: a person reads it for a name (docs/models.md).
  return {
    kind: 'not-found',
    served: servedModels(pools)
      .map((m) => m.id)
      .sort(),
  };
}

function inPool(index: number, pool: PoolModels, model: string): PoolChoice {
  const alias = pool.aliases.find((a) => a.name === model);
  const resolved = alias?.model ?? model;
  return { kind: 'pool', index, resolved, aliased: resolved !== model };
}

/** One entry of the sidecar's own `/v1/models` list. */
export interface ServedModelEntry {
  readonly id: string;
  /** The pool that takes requests for it (the first that knows it). */
  readonly pool: string;
  /** A LoRA adapter's base model, or the served model an alias stands for. */
  readonly parent?: string;
}

/**
 * Every model the pools know, each once, in pool order (the pool that takes it wins a duplicate):
 * per pool its declared models, then those its endpoints serve, then its alias names (with the
 * model each stands for as `parent`). Empty when no pool knows any model.
 */
export function servedModels(pools: readonly (PoolModels | undefined)[]): ServedModelEntry[] {
  const seen = new Set<string>();
  const list: ServedModelEntry[] = [];
  const add = (entry: ServedModelEntry): void => {
    if (seen.has(entry.id)) return;
    seen.add(entry.id);
    list.push(entry);
  };
  for (const pool of pools) {
    if (pool === undefined) continue;
    for (const id of pool.declared) add({ id, pool: pool.name });
    for (const [id, served] of pool.served.models) {
      add(
        served.parent === undefined || served.parent === id
          ? { id, pool: pool.name }
          : { id, pool: pool.name, parent: served.parent },
      );
    }
    for (const alias of pool.aliases) add({ id: alias.name, pool: pool.name, parent: alias.model });
  }
  return list;
}

/** The longest model name quoted in an error message (a client may send megabytes there). */
const MAX_QUOTED_MODEL_CHARS = 200;

/** The 404 message of a model no pool serves (rule 1 of issue 42's brief, docs/sidecar.md). */
export function modelNotFoundMessage(model: string, served: readonly string[]): string {
  const quoted = model.length > MAX_QUOTED_MODEL_CHARS ? `${model.slice(0, 200)}…` : model;
  const list = served.length === 0 ? 'none known yet' : served.join(', ');
  return `The model \`${quoted}\` is not served here. Served models: ${list}.`;
}

/** The name the client's request body gives as `model`, if it is a string. */
export function requestedModel(fields: Record<string, unknown> | undefined): string | undefined {
  const model = fields?.model;
  return typeof model === 'string' ? model : undefined;
}

/**
 * The `x-switchyard-backend` header: the endpoint's id, and the model the request was sent with
 * when that is not the name the client asked for (an alias, a backend's `model:`).
 */
export function backendHeader(
  endpointId: string,
  requested: string | undefined,
  sent: string | undefined,
): string {
  return sent === undefined || sent === requested ? endpointId : `${endpointId}; model=${sent}`;
}

/** The boundary of a `multipart/form-data` content type, or undefined for any other. */
export function multipartBoundary(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const [type, ...params] = contentType.split(';');
  if (type?.trim().toLowerCase() !== 'multipart/form-data') return undefined;
  for (const param of params) {
    const eq = param.indexOf('=');
    if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== 'boundary') continue;
    let value = param.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2)
      value = value.slice(1, -1);
    // RFC 2046: 1 to 70 characters.
    return value.length >= 1 && value.length <= 70 ? value : undefined;
  }
  return undefined;
}

/** Where a form field's value lies in a multipart body: bytes [start, end). */
export interface FieldSpan {
  readonly value: string;
  readonly start: number;
  readonly end: number;
}

/** The longest field value read as a model name; a longer `model` field is left alone. */
const MAX_MODEL_FIELD_BYTES = 4096;

/**
 * The first plain field (not a file) named `name` in a multipart body, or undefined when the body
 * has none or is not well-formed multipart. Linear in the body: parts are found by searching for
 * the delimiter, never by reading a file part's bytes one by one.
 */
export function findMultipartField(
  body: Buffer,
  boundary: string,
  name: string,
): FieldSpan | undefined {
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  // The first delimiter may open the body without the CRLF before it.
  let at: number;
  if (body.subarray(0, delimiter.length - 2).equals(delimiter.subarray(2))) {
    at = delimiter.length - 2;
  } else {
    const first = body.indexOf(delimiter);
    if (first === -1) return undefined;
    at = first + delimiter.length;
  }
  for (;;) {
    // After a delimiter: `--` closes the body; else the rest of the line, then the part's headers.
    if (body[at] === 0x2d && body[at + 1] === 0x2d) return undefined;
    const lineEnd = body.indexOf('\r\n', at);
    if (lineEnd === -1) return undefined;
    const headersEnd = body.indexOf('\r\n\r\n', lineEnd);
    if (headersEnd === -1) return undefined;
    const valueStart = headersEnd + 4;
    const next = body.indexOf(delimiter, valueStart);
    if (next === -1) return undefined;
    const headers = body.subarray(lineEnd + 2, headersEnd).toString('latin1');
    if (isPlainField(headers, name) && next - valueStart <= MAX_MODEL_FIELD_BYTES) {
      return {
        value: body.subarray(valueStart, next).toString('utf8'),
        start: valueStart,
        end: next,
      };
    }
    at = next + delimiter.length;
  }
}

/** Whether a part's headers make it the form field `name` (a `form-data` part, no filename). */
function isPlainField(headers: string, name: string): boolean {
  for (const line of headers.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon === -1 || line.slice(0, colon).trim().toLowerCase() !== 'content-disposition')
      continue;
    const params = line.slice(colon + 1).split(';');
    if (params[0]?.trim().toLowerCase() !== 'form-data') return false;
    let fieldName: string | undefined;
    for (const param of params.slice(1)) {
      const eq = param.indexOf('=');
      if (eq === -1) continue;
      const key = param.slice(0, eq).trim().toLowerCase();
      let value = param.slice(eq + 1).trim();
      if (value.startsWith('"') && value.endsWith('"') && value.length >= 2)
        value = value.slice(1, -1);
      if (key === 'filename' || key === 'filename*') return false;
      if (key === 'name') fieldName = value;
    }
    return fieldName === name;
  }
  return false;
}

/** The body with the bytes [span.start, span.end) replaced by `value`. */
export function replaceField(body: Buffer, span: FieldSpan, value: string): Buffer {
  return Buffer.concat([
    body.subarray(0, span.start),
    Buffer.from(value, 'utf8'),
    body.subarray(span.end),
  ]);
}
