/**
 * Pretty-printed JSON with one long array, written in slices of the array: at 4,096 endpoints
 * `/debug/backends` is megabytes, and one `JSON.stringify` of it is one long task on the proxy's
 * loop (issue 16).
 */

/** `JSON.stringify(value, null, 2)` of an array element, indented to its place in the array. */
function element(value: unknown): string {
  const text = JSON.stringify(value, null, 2) ?? 'null'; // undefined in an array is written null
  return `    ${text.replaceAll('\n', '\n    ')}`;
}

/**
 * `JSON.stringify({ ...head, [key]: items.map(describe) }, null, 2)`, where `items` are the
 * slices `slices()` yields, joined. In pieces: the head, one piece per slice (taken from `slices`,
 * described and stringified only when the piece is asked for), the close. `key` must not be a
 * key of `head` (the array is the object's last member).
 */
export function* prettyJsonInSlices<T>(
  head: Readonly<Record<string, unknown>>,
  key: string,
  slices: () => Iterable<readonly T[]>,
  describe: (item: T) => unknown,
): Generator<string> {
  const empty = JSON.stringify({ ...head, [key]: [] }, null, 2);
  // `…"key": []\n}` becomes `…"key": [\n`, the elements, `\n  ]\n}`.
  const open = `${empty.slice(0, -'[]\n}'.length)}[\n`;
  let first = true;
  for (const slice of slices()) {
    if (slice.length === 0) continue;
    const text = slice.map((item) => element(describe(item))).join(',\n');
    yield first ? `${open}${text}` : `,\n${text}`;
    first = false;
  }
  yield first ? empty : '\n  ]\n}';
}
