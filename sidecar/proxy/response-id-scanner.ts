/**
 * Finds the id of a Responses API answer in its first bytes, without parsing or holding the
 * answer. Both shapes put it first: a JSON response object starts with `{"id":"resp_…"` (OpenAI
 * and vLLM), and a stream's first event is `response.created`, whose `response.id` is the
 * first `"id"` of the stream (vLLM: `data: {"response":{"id":…`; OpenAI:
 * `data: {"type":"response.created","sequence_number":0,"response":{"id":…`).
 */

/** The id comes within the first event or the first fields; past this, give up. */
export const RESPONSE_ID_SCAN_LIMIT_BYTES = 16 * 1024;

/** The longest id remembered; OpenAI's and vLLM's are about 50 characters. */
export const RESPONSE_ID_MAX_CHARS = 256;

const ID_FIELD = new RegExp(`"id"\\s*:\\s*"([A-Za-z0-9_.-]{1,${RESPONSE_ID_MAX_CHARS}})"`);

export class ResponseIdScanner {
  #text = '';
  #done = false;
  readonly #onId: (id: string) => void;

  constructor(onId: (id: string) => void) {
    this.#onId = onId;
  }

  /** Feeds one chunk of the answer; calls `onId` once, when the id is found. */
  feed(chunk: Buffer): void {
    if (this.#done) return;
    this.#text += chunk.toString('latin1');
    const found = ID_FIELD.exec(this.#text);
    if (found !== null) {
      this.#done = true;
      this.#text = '';
      // The capture is a slice of the text scanned (up to the whole first chunk, 32 KiB and
      // more): kept as a Map key, it would keep all of that alive as long as the id is remembered.
      this.#onId(ownCopy(found[1] as string));
    } else if (this.#text.length >= RESPONSE_ID_SCAN_LIMIT_BYTES) {
      this.#done = true;
      this.#text = '';
    }
  }
}

/**
 * `text` in a string of its own. V8 makes a regex capture or `slice` of 13 characters or more a
 * view into its parent string, which stays alive as long as the view does: a remembered response
 * id cut from a 32 KiB chunk cost 32 KiB (issue 40). A round trip through a buffer makes a fresh
 * flat string; latin1 keeps one byte per character (ids are ASCII), UTF-16 any other text whole.
 */
export function ownCopy(text: string): string {
  // eslint-disable-next-line no-control-regex
  const oneByte = /^[\u0000-\u00ff]*$/.test(text);
  const encoding = oneByte ? 'latin1' : 'utf16le';
  return Buffer.from(text, encoding).toString(encoding);
}
