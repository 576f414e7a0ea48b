/**
 * The shape of a JSON value, and where two values differ in it: the simulator's calibration
 * against vLLM compares what both answer to the same request by shape, not by value (ids,
 * timestamps, text and token counts differ by nature). Two values have the same shape when they
 * are of the same kind (null, boolean, number, string, array, object), objects have the same keys,
 * arrays the same length, and each member has the same shape again. The values of a few keys
 * (`object`, `type`, `finish_reason`, ...) are part of the shape too: the caller names them.
 */

export type JsonKind = 'null' | 'boolean' | 'number' | 'string' | 'array' | 'object';

export function jsonKind(value: unknown): JsonKind {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  const t = typeof value;
  if (t === 'boolean' || t === 'number' || t === 'string') return t;
  return 'object';
}

/** One place where the actual value's shape is not the expected one. */
export interface ShapeDifference {
  /** Where, as `choices[0].delta.content` ('' for the root); a caller may prefix its own. */
  readonly path: string;
  /**
   * `missing`: a key expected and absent; `extra`: a key not expected; `kind`: another JSON kind;
   * `value`: another value where the value counts; `length`: an array of another length.
   */
  readonly kind: 'missing' | 'extra' | 'kind' | 'value' | 'length';
  readonly expected: string;
  readonly actual: string;
}

export interface ShapeDiffOptions {
  /** Keys whose values must be equal, not only of the same kind (at any depth). */
  readonly sameValue?: ReadonlySet<string>;
}

/** A short rendering of a value for a difference's message. */
function show(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function join(path: string, key: string): string {
  return path === '' ? key : `${path}.${key}`;
}

/** Every difference of shape between `expected` and `actual`, in document order. */
export function shapeDiff(
  expected: unknown,
  actual: unknown,
  options: ShapeDiffOptions = {},
  path = '',
): ShapeDifference[] {
  const out: ShapeDifference[] = [];
  walk(expected, actual, options, path, undefined, out);
  return out;
}

function walk(
  expected: unknown,
  actual: unknown,
  options: ShapeDiffOptions,
  path: string,
  key: string | undefined,
  out: ShapeDifference[],
): void {
  const ek = jsonKind(expected);
  const ak = jsonKind(actual);
  if (ek !== ak) {
    out.push({
      path,
      kind: 'kind',
      expected: `${ek} ${show(expected)}`,
      actual: `${ak} ${show(actual)}`,
    });
    return;
  }
  if (ek === 'array') {
    const e = expected as unknown[];
    const a = actual as unknown[];
    if (e.length !== a.length) {
      out.push({
        path,
        kind: 'length',
        expected: `${e.length} items`,
        actual: `${a.length} items`,
      });
    }
    for (let i = 0; i < Math.min(e.length, a.length); i++) {
      walk(e[i], a[i], options, `${path}[${i}]`, undefined, out);
    }
    return;
  }
  if (ek === 'object') {
    const e = expected as Record<string, unknown>;
    const a = actual as Record<string, unknown>;
    for (const k of Object.keys(e)) {
      if (!Object.hasOwn(a, k)) {
        out.push({
          path: join(path, k),
          kind: 'missing',
          expected: show(e[k]),
          actual: '(absent)',
        });
      } else walk(e[k], a[k], options, join(path, k), k, out);
    }
    for (const k of Object.keys(a)) {
      if (!Object.hasOwn(e, k)) {
        out.push({ path: join(path, k), kind: 'extra', expected: '(absent)', actual: show(a[k]) });
      }
    }
    return;
  }
  if (key !== undefined && options.sameValue?.has(key) === true && expected !== actual) {
    out.push({ path, kind: 'value', expected: show(expected), actual: show(actual) });
  }
}

/** A difference's path with every array index as `[*]`, the form allow-lists name. */
export function genericPath(path: string): string {
  return path.replace(/\[\d+\]/g, '[*]');
}

/** One line per difference, for an assertion message. */
export function formatDifferences(differences: readonly ShapeDifference[]): string {
  return differences
    .map((d) => `${d.path || '(root)'}: ${d.kind}, vLLM ${d.expected}, simulator ${d.actual}`)
    .join('\n');
}
