/**
 * Validation of an InferencePool document: a standalone pool file, or the resource as the
 * controller reads it.
 *
 * `validatePool` never throws. It lists every problem it finds, each with a path written like the
 * API server writes it (`spec.backends[1].url`) and a reason a person understands, and on success
 * returns the pool with every default applied.
 *
 * What it does, in order:
 * 1. copies the input as plain JSON data (rejecting cycles, functions and the like), dropping
 *    fields whose value is null, as the API server prunes them;
 * 2. applies the schema defaults to fields that are missing (never to fields of the wrong type);
 * 3. checks the schema (TypeBox `Value.Errors`), unknown fields included: the API server would
 *    silently prune a typo like `helth`, a pool file must not;
 * 4. runs the semantic rules (`semantic.ts`): the TypeScript twins of the CRD's CEL rules, with the
 *    same messages, plus the format checks of URLs and durations and the alias checks CEL cannot
 *    afford.
 */
import { Kind, type TSchema } from '@sinclair/typebox';
import { Value, ValueErrorType, type ValueError } from '@sinclair/typebox/value';
import { DURATION_HELP } from './duration.ts';
import { type InferencePool, InferencePoolSchema } from './inference-pool.schema.ts';
import { type PoolError, ROOT_PATH, hasOwn, isRecord, joinPath, splitPath } from './path.ts';
import { FORMATS, checkAliasesAgainstBackends, checkSemantics } from './semantic.ts';

export type { PoolError } from './path.ts';

export type PoolValidation = { ok: true; pool: InferencePool } | { ok: false; errors: PoolError[] };

/** Deeper than any real pool document; protects the recursive steps below. */
const MAX_DEPTH = 100;
/** Values in the document (counting each copy of a shared value): protects against alias bombs. */
const MAX_NODES = 200_000;

/**
 * Validate a parsed pool document (from YAML or JSON, or the resource as read from the API
 * server). Never throws.
 */
export function validatePool(doc: unknown): PoolValidation {
  try {
    return validateUnsafe(doc);
  } catch (err) {
    // Not reachable with plain data; a last line of defence for exotic inputs.
    return {
      ok: false,
      errors: [{ path: ROOT_PATH, message: `could not be validated: ${describeThrown(err)}` }],
    };
  }
}

function validateUnsafe(doc: unknown): PoolValidation {
  const copy = toPlainData(doc);
  if (!copy.ok) return { ok: false, errors: [copy.error] };
  const value = copy.value;
  if (!isRecord(value)) {
    return {
      ok: false,
      errors: [
        {
          path: ROOT_PATH,
          message: `must be a mapping with apiVersion, kind, metadata and spec, not ${describeValue(value)}`,
        },
      ],
    };
  }
  applyDefaults(InferencePoolSchema, value);

  const errors: PoolError[] = [];
  const required = new Set<string>();
  const schemaErrors = [...Value.Errors(InferencePoolSchema, value)];
  for (const e of schemaErrors) {
    if (e.type === ValueErrorType.ObjectRequiredProperty) required.add(e.path);
  }
  const empty = new Set<string>();
  for (const e of schemaErrors) {
    // A missing field also fails its type check; "is required" says it all. Likewise an empty
    // string fails its pattern too; "must not be empty" says it all.
    if (required.has(e.path) && e.type !== ValueErrorType.ObjectRequiredProperty) continue;
    if (empty.has(e.path)) continue;
    if (e.type === ValueErrorType.StringMinLength && e.value === '') empty.add(e.path);
    errors.push({ path: pointerToPath(e.path, value), message: describeError(e) });
  }
  errors.push(...checkSemantics(InferencePoolSchema, value, ROOT_PATH));
  if (isRecord(value['spec'])) {
    errors.push(...checkAliasesAgainstBackends(value['spec'], joinPath(ROOT_PATH, 'spec')));
  }

  const unique = inDocumentOrder(dedupe(errors), value);
  if (unique.length > 0) return { ok: false, errors: unique };
  if (!Value.Check(InferencePoolSchema, value)) {
    // Not reachable: Value.Errors found nothing. Kept so the cast below is never a lie.
    return { ok: false, errors: [{ path: ROOT_PATH, message: 'does not match the schema' }] };
  }
  return { ok: true, pool: value };
}

function dedupe(errors: PoolError[]): PoolError[] {
  const seen = new Set<string>();
  return errors.filter((e) => {
    const key = `${e.path}\u0000${e.message}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/**
 * Sort errors the way a person reads the file: by where their path is in the document (key order
 * as written, a missing field after its present siblings), a field before the fields inside it.
 * Errors at the same place keep their order.
 */
function inDocumentOrder(errors: PoolError[], root: unknown): PoolError[] {
  const position = (path: string): number[] => {
    const out: number[] = [];
    let current: unknown = root;
    for (const segment of splitPath(path)) {
      if (typeof segment === 'number' && Array.isArray(current)) {
        out.push(segment);
        current = current[segment];
      } else if (isRecord(current)) {
        const keys = Object.keys(current);
        const index = keys.indexOf(String(segment));
        out.push(index === -1 ? keys.length : index);
        current = index === -1 ? undefined : current[String(segment)];
      } else {
        out.push(Number.MAX_SAFE_INTEGER);
        current = undefined;
      }
    }
    return out;
  };
  const keyed = errors.map((error, order) => ({ error, order, at: position(error.path) }));
  keyed.sort((a, b) => {
    for (let i = 0; i < Math.min(a.at.length, b.at.length); i++) {
      const d = (a.at[i] ?? 0) - (b.at[i] ?? 0);
      if (d !== 0) return d;
    }
    return a.at.length - b.at.length || a.order - b.order;
  });
  return keyed.map((k) => k.error);
}

// ---------------------------------------------------------------------------------------------
// 1. Plain data
// ---------------------------------------------------------------------------------------------

type PlainCopy = { ok: true; value: unknown } | { ok: false; error: PoolError };

/**
 * A deep copy made of null, booleans, numbers, strings, arrays and plain objects only, with null
 * object fields left out. Keys are defined, not assigned, so a `__proto__` key stays a key.
 */
function toPlainData(doc: unknown): PlainCopy {
  let nodes = 0;
  const ancestors = new Set<object>();
  let failure: PoolError | undefined;
  const fail = (path: string, message: string): undefined => {
    failure ??= { path, message };
    return undefined;
  };

  const copy = (value: unknown, path: string, depth: number): unknown => {
    if (failure !== undefined) return undefined;
    if (++nodes > MAX_NODES)
      return fail(path, `the document is too large (over ${MAX_NODES} values)`);
    if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
    if (value === undefined) return undefined; // only the root can be undefined here
    if (typeof value === 'number') return value;
    if (typeof value !== 'object') {
      return fail(path, `must be plain data (YAML or JSON values), not ${typeof value}`);
    }
    if (depth > MAX_DEPTH) return fail(path, `is nested too deeply (over ${MAX_DEPTH} levels)`);
    if (ancestors.has(value)) {
      return fail(path, 'refers to itself (a YAML alias inside its own anchor)');
    }
    ancestors.add(value);
    try {
      if (Array.isArray(value)) {
        const out: unknown[] = [];
        for (let i = 0; i < value.length; i++) {
          const item: unknown = value[i];
          if (item === undefined) return fail(joinPath(path, i), 'must be a value, not undefined');
          out.push(copy(item, joinPath(path, i), depth + 1));
        }
        return out;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        return fail(path, 'must be plain data (YAML or JSON values), not a class instance');
      }
      const out: Record<string, unknown> = {};
      for (const key of Object.keys(value)) {
        const item = (value as Record<string, unknown>)[key];
        if (item === null || item === undefined) continue;
        Object.defineProperty(out, key, {
          value: copy(item, joinPath(path, key), depth + 1),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    } finally {
      ancestors.delete(value);
    }
  };

  const value = copy(doc, ROOT_PATH, 0);
  return failure === undefined ? { ok: true, value } : { ok: false, error: failure };
}

// ---------------------------------------------------------------------------------------------
// 2. Defaults
// ---------------------------------------------------------------------------------------------

interface Node {
  [Kind]?: string;
  properties?: Record<string, Node>;
  items?: Node;
  default?: unknown;
}

/**
 * Fill missing fields that have a `default`, recursively, as the API server does: a section with
 * `default: {}` (like `health`) is created and then gets its own fields' defaults. A field of the
 * wrong type is left alone for the schema check to report.
 */
function applyDefaults(schema: TSchema, value: unknown): void {
  const node = schema as Node;
  if (node[Kind] === 'Object' && isRecord(value)) {
    for (const [key, child] of Object.entries(node.properties ?? {})) {
      if (!hasOwn(value, key) && child.default !== undefined) {
        value[key] = structuredClone(child.default);
      }
      if (hasOwn(value, key)) applyDefaults(child as TSchema, value[key]);
    }
  } else if (node[Kind] === 'Array' && Array.isArray(value) && node.items !== undefined) {
    for (const item of value) applyDefaults(node.items as TSchema, item);
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Schema errors, for people
// ---------------------------------------------------------------------------------------------

/** `/spec/backends/1/url` → `spec.backends[1].url` (arrays are told apart by the value). */
function pointerToPath(pointer: string, root: unknown): string {
  if (pointer === '') return ROOT_PATH;
  let path = ROOT_PATH;
  let current: unknown = root;
  for (const raw of pointer.slice(1).split('/')) {
    const segment = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(current) && /^(0|[1-9][0-9]*)$/.test(segment)) {
      const index = Number(segment);
      path = joinPath(path, index);
      current = current[index];
    } else {
      path = joinPath(path, segment);
      current = isRecord(current) && hasOwn(current, segment) ? current[segment] : undefined;
    }
  }
  return path;
}

interface ErrorSchema {
  [Kind]?: string;
  const?: unknown;
  anyOf?: ErrorSchema[];
  properties?: Record<string, unknown>;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  pattern?: string;
  errorMessage?: string;
  'x-switchyard-format'?: string;
}

function describeError(e: ValueError): string {
  const s = e.schema as ErrorSchema;
  const v: unknown = e.value;
  const format = s['x-switchyard-format'];
  if (format !== undefined && typeof v === 'string') {
    const reason = FORMATS[format]?.(v);
    if (reason !== undefined) return reason;
  }
  if (format === 'duration' && typeof v === 'number') {
    return `${DURATION_HELP}: ${String(v)} has no unit (${String(v)}ms? ${String(v)}s?)`;
  }
  switch (e.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return 'is required';
    case ValueErrorType.ObjectAdditionalProperties:
      return unknownField(e.path, Object.keys(s.properties ?? {}));
    case ValueErrorType.Object:
      return `must be a mapping of fields, not ${describeValue(v)}`;
    case ValueErrorType.Array:
      return `must be a list, not ${describeValue(v)}`;
    case ValueErrorType.String:
      return `must be a string, not ${describeValue(v)}`;
    case ValueErrorType.Boolean:
      return `must be true or false, not ${describeValue(v)}`;
    case ValueErrorType.Number:
      return typeof v === 'number'
        ? `must be a finite number, not ${String(v)}`
        : `must be a number, not ${describeValue(v)}`;
    case ValueErrorType.Integer:
      return typeof v === 'number' && Number.isFinite(v)
        ? `must be a whole number, not ${String(v)}`
        : `must be a whole number, not ${describeValue(v)}`;
    case ValueErrorType.Literal:
      return `must be ${String(s.const)}, not ${describeValue(v)}`;
    case ValueErrorType.Union:
      return describeUnion(s, v);
    case ValueErrorType.NumberMinimum:
    case ValueErrorType.NumberMaximum:
    case ValueErrorType.IntegerMinimum:
    case ValueErrorType.IntegerMaximum:
      return `${range(s)}, not ${String(v)}`;
    case ValueErrorType.NumberExclusiveMinimum:
    case ValueErrorType.IntegerExclusiveMinimum:
      return `must be greater than ${String(s.exclusiveMinimum)}, not ${String(v)}`;
    case ValueErrorType.NumberExclusiveMaximum:
    case ValueErrorType.IntegerExclusiveMaximum:
      return `must be less than ${String(s.exclusiveMaximum)}, not ${String(v)}`;
    case ValueErrorType.StringMinLength:
      return s.minLength === 1
        ? 'must not be empty'
        : (s.errorMessage ?? `must be at least ${String(s.minLength)} characters long`);
    case ValueErrorType.StringMaxLength:
      return `must be at most ${String(s.maxLength)} characters long`;
    case ValueErrorType.StringPattern:
      return s.errorMessage ?? `must match the pattern ${String(s.pattern)}`;
    case ValueErrorType.ArrayMinItems:
      return s.minItems === 1
        ? 'must not be empty'
        : `must have at least ${String(s.minItems)} items`;
    case ValueErrorType.ArrayMaxItems:
      return `must have at most ${String(s.maxItems)} items, not ${Array.isArray(v) ? v.length : '?'}`;
    default:
      return s.errorMessage ?? e.message;
  }
}

function range(s: ErrorSchema): string {
  if (s.minimum !== undefined && s.maximum !== undefined) {
    return `must be from ${s.minimum} to ${s.maximum}`;
  }
  if (s.minimum !== undefined) return `must be at least ${s.minimum}`;
  return `must be at most ${String(s.maximum)}`;
}

function describeUnion(s: ErrorSchema, v: unknown): string {
  const literals = (s.anyOf ?? []).map((a) => a.const);
  if (literals.length > 0 && literals.every((l) => typeof l === 'string')) {
    const names = literals;
    const hint =
      typeof v === 'string' ? names.find((n) => n.toLowerCase() === v.toLowerCase()) : undefined;
    return (
      `must be one of ${names.join(', ')}, not ${describeValue(v)}` +
      (hint === undefined ? '' : ` (did you mean ${hint}?)`)
    );
  }
  return s.errorMessage ?? `must not be ${describeValue(v)}`;
}

function unknownField(pointer: string, known: string[]): string {
  const field = pointer
    .slice(pointer.lastIndexOf('/') + 1)
    .replace(/~1/g, '/')
    .replace(/~0/g, '~');
  if (known.length === 0) return 'unknown field; this is an empty mapping, written {}';
  const close = known.filter((k) => similar(field, k));
  if (close.length > 0) return `unknown field; did you mean ${close.join(' or ')}?`;
  return `unknown field; the fields here are ${known.join(', ')}`;
}

/** Same name up to case, `_`/`-`, or a typo or two (edit distance). */
function similar(a: string, b: string): boolean {
  const norm = (s: string) => s.toLowerCase().replace(/[-_]/g, '');
  if (norm(a) === norm(b)) return true;
  if (a.length > 64) return false;
  return editDistance(a.toLowerCase(), b.toLowerCase()) <= Math.max(1, Math.floor(b.length / 4));
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost));
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}

/** `a string ("abc")`, `a number (5)`, `a list`, `a mapping`, `true`, `null`. */
export function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'nothing';
  if (typeof v === 'string') {
    const shown = v.length > 40 ? `${v.slice(0, 40)}...` : v;
    return `a string (${JSON.stringify(shown)})`;
  }
  if (typeof v === 'number') return `a number (${String(v)})`;
  if (typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  return typeof v;
}

function describeThrown(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
