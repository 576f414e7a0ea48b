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
 * `JSON.stringify({ ...head, [key]: items().map(describe) }, null, 2)`, in pieces: the head, then
 * `perSlice` elements per piece, described and stringified only when their piece is asked for, then
 * the close. `key` must not be a key of `head` (the array is the object's last member). `items` is
 * called when the first piece is asked for.
 */
export function* prettyJsonInSlices<T>(
  head: Readonly<Record<string, unknown>>,
  key: string,
  items: () => readonly T[],
  describe: (item: T) => unknown,
  perSlice: number,
): Generator<string> {
  const list = items();
  const empty = JSON.stringify({ ...head, [key]: [] }, null, 2);
  if (list.length === 0) {
    yield empty;
    return;
  }
  // `…"key": []\n}` becomes `…"key": [\n`, the elements, `\n  ]\n}`.
  yield `${empty.slice(0, -'[]\n}'.length)}[\n`;
  for (let start = 0; start < list.length; start += perSlice) {
    const end = Math.min(list.length, start + perSlice);
    const parts: string[] = [];
    for (let i = start; i < end; i++) parts.push(element(describe(list[i]!)));
    yield `${start > 0 ? ',\n' : ''}${parts.join(',\n')}`;
  }
  yield '\n  ]\n}';
}
