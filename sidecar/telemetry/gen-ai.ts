/**
 * The GenAI semantic conventions' view of a request
 * (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/), read cheaply: the
 * operation from the path, and the token usage from the last bytes of the response body, where
 * OpenAI-style servers put it (the `usage` object closes a JSON answer; a stream asked with
 * `stream_options.include_usage` ends with a usage chunk before `data: [DONE]`). Nothing is
 * buffered beyond that tail, and prompt text is never read.
 */

/** `gen_ai.operation.name` of each inference path the sidecar serves (or will). */
const OPERATIONS: ReadonlyMap<string, string> = new Map([
  ['/v1/chat/completions', 'chat'],
  ['/v1/completions', 'text_completion'],
  ['/v1/embeddings', 'embeddings'],
  ['/v1/responses', 'chat'],
  ['/v1/messages', 'chat'],
]);

export function genAiOperation(path: string): string | undefined {
  return OPERATIONS.get(path);
}

/** How many trailing bytes of a response body are kept to find its usage. */
export const USAGE_TAIL_BYTES = 2_048;

/**
 * The last `limit` bytes (at least) of a body seen chunk by chunk: older chunks are dropped as
 * soon as the newer ones cover the limit, so a long stream holds a few chunks at most.
 */
export class BodyTail {
  readonly #limit: number;
  #chunks: Buffer[] = [];
  #bytes = 0;

  constructor(limit = USAGE_TAIL_BYTES) {
    this.#limit = limit;
  }

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    while (this.#chunks.length > 1 && this.#bytes - this.#chunks[0]!.length >= this.#limit) {
      this.#bytes -= this.#chunks.shift()!.length;
    }
  }

  /** The kept bytes' last `limit`, as text (a multi-byte character cut at the start is harmless). */
  text(): string {
    const all = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks);
    return all.subarray(Math.max(0, all.length - this.#limit)).toString('utf8');
  }
}

export interface TokenUsage {
  inputTokens?: number;
  outputTokens?: number;
}

/**
 * Input tokens: `prompt_tokens` (Chat Completions, Completions, Embeddings) or `input_tokens`
 * (Responses, Messages); output tokens: `completion_tokens` or `output_tokens`. A key inside
 * generated text is escaped (`\"prompt_tokens\"`) and does not match.
 */
const INPUT = /"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)/g;
const OUTPUT = /"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)/g;

function lastNumber(pattern: RegExp, text: string): number | undefined {
  let found: number | undefined;
  for (const match of text.matchAll(pattern)) found = Number(match[1]);
  return found;
}

/** The token usage a response body's tail reports, the last one when there are several. */
export function tokenUsage(tail: string): TokenUsage {
  const usage: TokenUsage = {};
  const input = lastNumber(INPUT, tail);
  const output = lastNumber(OUTPUT, tail);
  if (input !== undefined) usage.inputTokens = input;
  if (output !== undefined) usage.outputTokens = output;
  return usage;
}
