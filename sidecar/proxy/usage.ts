/**
 * How many tokens an answer used (prompt + completion, from its `usage`), read as the answer is
 * relayed, never by holding it: token budgets (flow control, docs/flow-control.md) are charged
 * with it. And, for a streamed chat or completions request the sidecar asked `include_usage` of
 * on the client's behalf, the usage chunk taken back out of what that client sees.
 *
 * Only pools that charge tokens (flow control with a `tokensPerMinute` budget) pay for any of
 * this: elsewhere the request is sent as it came and the answer relayed untouched.
 */
import type { PoolPolicy } from '../../crds/policy-types.ts';

/** Whether a pool charges tokens: it has flow control and a budget in tokens per minute. */
export function countsTokens(policy: PoolPolicy): boolean {
  return policy.flowControl?.budgets.some((b) => b.tokensPerMinute !== undefined) ?? false;
}

/** The streamed APIs that send a usage chunk when asked (`stream_options.include_usage`). */
const ASKS_FOR_USAGE = new Set(['/v1/chat/completions', '/v1/completions']);

/**
 * The paths whose answers carry an OpenAI-shaped `usage` the sidecar reads: chat, completions,
 * Responses (the `response.completed` event's `response.usage` when streamed), embeddings. The
 * Anthropic `/v1/messages` stream splits its usage over two events (input in `message_start`,
 * output in `message_delta`), so the last one seen would undercount: not read (undefined).
 */
const READS_USAGE = new Set([
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/responses',
  '/v1/embeddings',
]);

export function readsUsage(path: string): boolean {
  return READS_USAGE.has(path);
}

/**
 * The request's fields with `stream_options.include_usage: true` added, when the sidecar must ask
 * for usage itself: a streamed chat or completions request that did not ask. Undefined when the
 * body stays as it came: not streamed, another API, already asked, or a `stream_options` that is
 * not an object (the server refuses that with its own 400; the sidecar does not mend it).
 */
export function withUsageAsked(
  path: string,
  fields: Record<string, unknown>,
): Record<string, unknown> | undefined {
  if (fields.stream !== true || !ASKS_FOR_USAGE.has(path)) return undefined;
  const options = fields.stream_options;
  if (options === undefined || options === null) {
    return { ...fields, stream_options: { include_usage: true } };
  }
  if (typeof options !== 'object' || Array.isArray(options)) return undefined;
  const record = options as Record<string, unknown>;
  if (record.include_usage === true) return undefined;
  return { ...fields, stream_options: { ...record, include_usage: true } };
}

/**
 * Prompt + completion tokens of a `usage` object: `total_tokens`, else `prompt_tokens +
 * completion_tokens` (chat, completions), else `input_tokens + output_tokens` (Responses);
 * undefined when it says none of these.
 */
export function tokensOf(usage: unknown): number | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  if (isCount(u.total_tokens)) return u.total_tokens;
  if (isCount(u.prompt_tokens) && isCount(u.completion_tokens))
    return u.prompt_tokens + u.completion_tokens;
  if (isCount(u.input_tokens) && isCount(u.output_tokens)) return u.input_tokens + u.output_tokens;
  // Embeddings (and an engine that counts no completion): the prompt is all there is.
  if (isCount(u.prompt_tokens) && u.completion_tokens === undefined) return u.prompt_tokens;
  return undefined;
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

const KEY = Buffer.from('"usage"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN = 0x7b;
const CLOSE = 0x7d;
const COLON = 0x3a;

/** A usage object longer than this is not one (they are a few hundred bytes): skipped. */
export const USAGE_OBJECT_MAX_BYTES = 4 * 1024;

function isJsonSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

/** Where the scan is. */
const ScanState = {
  /** Looking for `"usage"`; `matched` bytes of it ended the last chunk. */
  Search: 0,
  /** After the key: whitespace, then `:`. */
  Colon: 1,
  /** After the colon: whitespace, then `{` (anything else, `null` say, is not a usage). */
  Value: 2,
  /** Inside the object, copied until its braces balance. */
  Object: 3,
} as const;
type ScanState = (typeof ScanState)[keyof typeof ScanState];

/**
 * Finds every `"usage": {…}` of an answer as it streams past, JSON or SSE alike, and keeps the
 * prompt + completion tokens of the last one: the final usage chunk of a chat or completions
 * stream (also when the server sends a running usage in every chunk: the last is the total), the
 * `response.usage` of a Responses stream's `response.completed`, the `usage` of a JSON answer.
 *
 * Why a scan for the key rather than parsing: a JSON answer can be large, and its usage is not
 * always at its end (vLLM puts `prompt_logprobs`, possibly megabytes, after it), so neither
 * "parse it whole when small" nor "keep its last 64 KiB" finds it for sure without holding a
 * copy. In JSON text an unescaped `"usage"` followed by `:` is a key (a quote inside a string is
 * escaped), so the scan finds exactly the usage fields, at any depth; the answers read here have
 * none but the top-level one (a Responses event's `response.usage`). It holds at most
 * `USAGE_OBJECT_MAX_BYTES`, and a chunk without the key costs one native `indexOf`.
 */
export class UsageScanner {
  #state: ScanState = ScanState.Search;
  /** How many bytes of `"usage"` ended the chunk before (Search). */
  #matched = 0;
  /** The usage object so far (Object). */
  #parts: Buffer[] = [];
  #bytes = 0;
  #depth = 0;
  #inString = false;
  #escaped = false;
  #tokens: number | undefined;

  /** Prompt + completion tokens of the last usage seen; undefined while none was. */
  get tokens(): number | undefined {
    return this.#tokens;
  }

  feed(chunk: Buffer): void {
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      switch (this.#state) {
        case ScanState.Search: {
          if (this.#matched > 0) {
            // The key began at the end of the last chunk: go on byte by byte.
            if (chunk[i] === KEY[this.#matched]) {
              i++;
              if (++this.#matched === KEY.length) {
                this.#matched = 0;
                this.#state = ScanState.Colon;
              }
            } else {
              // Not the key; the only quote in a key's prefix is its first byte, so no other
              // match starts in what was matched: look at this byte afresh.
              this.#matched = 0;
            }
            continue;
          }
          const at = chunk.indexOf(KEY, i);
          if (at >= 0) {
            i = at + KEY.length;
            this.#state = ScanState.Colon;
            continue;
          }
          this.#matched = partialKeyAtEnd(chunk, i);
          i = n;
          continue;
        }
        case ScanState.Colon: {
          const byte = chunk[i] as number;
          if (isJsonSpace(byte)) i++;
          else if (byte === COLON) {
            i++;
            this.#state = ScanState.Value;
          } else this.#state = ScanState.Search;
          continue;
        }
        case ScanState.Value: {
          const byte = chunk[i] as number;
          if (isJsonSpace(byte)) i++;
          else if (byte === OPEN) {
            this.#state = ScanState.Object;
            this.#parts = [];
            this.#bytes = 0;
            this.#depth = 0;
            this.#inString = false;
            this.#escaped = false;
          } else this.#state = ScanState.Search;
          continue;
        }
        case ScanState.Object:
          i = this.#object(chunk, i);
          continue;
      }
    }
  }

  /** Copies the object's bytes from `start` until its braces balance; returns where it stopped. */
  #object(chunk: Buffer, start: number): number {
    let i = start;
    const n = chunk.length;
    let closed = false;
    for (; i < n; i++) {
      const byte = chunk[i] as number;
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (byte === BACKSLASH) this.#escaped = true;
        else if (byte === QUOTE) this.#inString = false;
      } else if (byte === QUOTE) this.#inString = true;
      else if (byte === OPEN) this.#depth++;
      else if (byte === CLOSE && --this.#depth === 0) {
        i++;
        closed = true;
        break;
      }
      if (this.#bytes + (i - start) >= USAGE_OBJECT_MAX_BYTES) {
        // Not a usage object: look for the key again from here.
        this.#parts = [];
        this.#state = ScanState.Search;
        return i + 1;
      }
    }
    this.#parts.push(chunk.subarray(start, i));
    this.#bytes += i - start;
    if (!closed) return i;
    const text = Buffer.concat(this.#parts, this.#bytes).toString('utf8');
    this.#parts = [];
    this.#state = ScanState.Search;
    try {
      const tokens = tokensOf(JSON.parse(text));
      if (tokens !== undefined) this.#tokens = tokens;
    } catch {
      // Not JSON after all (a stream cut inside it is never closed, so not this): ignore it.
    }
    return i;
  }
}

/** How many bytes of `"usage"` (a proper prefix of it) end `chunk` after `from`. */
function partialKeyAtEnd(chunk: Buffer, from: number): number {
  const n = chunk.length;
  // A prefix starts with the key's only quote but its last: find it in the last bytes, in JS
  // (a native call per candidate length would cost more than the whole chunk's search).
  next: for (let k = Math.min(KEY.length - 1, n - from); k > 0; k--) {
    if (chunk[n - k] !== QUOTE) continue;
    for (let j = 1; j < k; j++) if (chunk[n - k + j] !== KEY[j]) continue next;
    return k;
  }
  return 0;
}

const EMPTY = Buffer.alloc(0);
const LF = 0x0a;
const CR = 0x0d;

/**
 * An incomplete event held longer than this is not the usage chunk (a few hundred bytes): it goes
 * on to the client as it comes, its end found without holding it.
 */
export const HOLD_MAX_BYTES = 16 * 1024;

/** An event that has a choice: not the usage-only chunk, whatever follows. */
const HAS_A_CHOICE = /"choices"\s*:\s*\[\s*[^\s\]]/;
const NO_CHOICE = /"choices"\s*:\s*\[\s*\]/;

/**
 * Takes the usage-only chunk (`choices: []` with a non-null `usage`, which vLLM and OpenAI send
 * last when `include_usage` is on) out of an SSE stream, for a client that did not ask for it:
 * the sidecar asked on its behalf. Every other byte passes unchanged and at once: the stream is
 * cut into events at their blank line (`\n\n`, `\r\n\r\n`, or a mix; a stream that ends its
 * lines with a lone `\r` is passed through whole), each complete event other than the usage
 * chunk is passed as soon as its end is in, and only an incomplete last event that may still be
 * the usage chunk is held until its end comes (or it outgrows `HOLD_MAX_BYTES`, or shows a
 * choice).
 *
 * The `"usage": null` that OpenAI puts in every other chunk of such a stream stays: OpenAI's
 * clients read it as "no usage" (they do the same against OpenAI itself), and rewriting each
 * chunk would cost a parse and a copy per token.
 */
export class UsageChunkFilter {
  /** Bytes of the current event not yet passed on (held while it may be the usage chunk). */
  #held: Buffer = EMPTY;
  /** The current event is being passed on as it comes (it cannot be the usage chunk). */
  #passing = false;
  /** While passing: its last two bytes, already passed, where a blank line may have begun. */
  #passedTail: Buffer = EMPTY;

  /** What of `chunk` (and of what was held) goes to the client now; possibly empty. */
  feed(chunk: Buffer): Buffer {
    const lead = this.#passing ? this.#passedTail : this.#held;
    const buf = lead.length === 0 ? chunk : Buffer.concat([lead, chunk]);
    // `buf` from `sendFrom` on has not gone to the client; before it, the passed tail has.
    let sendFrom = this.#passing ? lead.length : 0;
    const out: Buffer[] = [];
    let eventStart = 0;
    // A blank line held or passed before would have ended that event: search from its last bytes.
    let i = Math.max(0, lead.length - 2);
    for (;;) {
      const end = eventEnd(buf, i);
      if (end < 0) break;
      if (this.#passing) this.#passing = false;
      else if (isUsageChunk(buf, eventStart, end)) {
        if (eventStart > sendFrom) out.push(buf.subarray(sendFrom, eventStart));
        sendFrom = end;
      }
      eventStart = end;
      i = end;
    }
    const n = buf.length;
    if (eventStart < n && !this.#passing) {
      const rest = buf.subarray(eventStart);
      if (rest.length <= HOLD_MAX_BYTES && !HAS_A_CHOICE.test(rest.toString('latin1'))) {
        if (eventStart > sendFrom) out.push(buf.subarray(sendFrom, eventStart));
        this.#held = rest;
        this.#passedTail = EMPTY;
        return join(out);
      }
      this.#passing = true;
    }
    this.#held = EMPTY;
    this.#passedTail = this.#passing ? Buffer.from(buf.subarray(Math.max(0, n - 2))) : EMPTY;
    if (sendFrom < n) {
      if (sendFrom === 0 && out.length === 0 && buf === chunk) return chunk;
      out.push(buf.subarray(sendFrom));
    }
    return join(out);
  }

  /** The stream ended: what was held goes out as it is (an event never finished). */
  flush(): Buffer {
    const held = this.#held;
    this.#held = EMPTY;
    return held;
  }
}

/** The pieces to pass on as one buffer (several only around a dropped event): one write. */
function join(parts: readonly Buffer[]): Buffer {
  if (parts.length === 0) return EMPTY;
  if (parts.length === 1) return parts[0] as Buffer;
  return Buffer.concat(parts);
}

/** The index after the blank line that ends the first event found from `from`; -1: none yet. */
function eventEnd(buf: Buffer, from: number): number {
  let i = from;
  for (;;) {
    const lf = buf.indexOf(LF, i);
    if (lf < 0) return -1;
    const next = buf[lf + 1];
    if (next === LF) return lf + 2;
    if (next === CR && buf[lf + 2] === LF) return lf + 3;
    i = lf + 1;
  }
}

/** Whether `buf[start, end)` is the usage-only chunk: no choice, a usage object. */
function isUsageChunk(buf: Buffer, start: number, end: number): boolean {
  const key = buf.indexOf(KEY, start);
  if (key < 0 || key >= end) return false;
  const text = buf.toString('utf8', start, end);
  if (!NO_CHOICE.test(text)) return false;
  const data = dataOf(text);
  if (data === undefined) return false;
  try {
    const parsed = JSON.parse(data) as unknown;
    if (typeof parsed !== 'object' || parsed === null) return false;
    const { choices, usage } = parsed as Record<string, unknown>;
    return (
      Array.isArray(choices) && choices.length === 0 && typeof usage === 'object' && usage !== null
    );
  } catch {
    return false;
  }
}

/** An SSE event's data: its `data:` lines, each without the field name and one space, joined. */
function dataOf(event: string): string | undefined {
  const lines: string[] = [];
  for (const line of event.split(/\r?\n/)) {
    if (!line.startsWith('data:')) continue;
    lines.push(line.charCodeAt(5) === 0x20 ? line.slice(6) : line.slice(5));
  }
  return lines.length === 0 ? undefined : lines.join('\n');
}
