/**
 * Finds the id of a Responses API answer in its first bytes, without parsing or holding the
 * answer. Both shapes put it first: a JSON response object starts with `{"id":"resp_…"` (OpenAI
 * and vLLM), and a stream's first event is `response.created`, whose `response.id` is the
 * first `"id"` of the stream (vLLM: `data: {"response":{"id":…`; OpenAI:
 * `data: {"type":"response.created","sequence_number":0,"response":{"id":…`).
 */

/** The id comes within the first event or the first fields; past this, give up. */
export const RESPONSE_ID_SCAN_LIMIT_BYTES = 16 * 1024;

const ID_FIELD = /"id"\s*:\s*"([A-Za-z0-9_.-]{1,256})"/;

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
      this.#onId(found[1] as string);
    } else if (this.#text.length >= RESPONSE_ID_SCAN_LIMIT_BYTES) {
      this.#done = true;
      this.#text = '';
    }
  }
}
