/**
 * OpenAI's wire format as vLLM 0.32 speaks it (test/engine/fixtures/chat*.http,
 * completions*.http): request parsing and validation, response objects and SSE chunks, with
 * vLLM's own fields (errors: api-error.ts).
 */
import { badRequest, isApiError } from './api-error.ts';
import type { ApiError } from './api-error.ts';
import type {
  AnswerUsage,
  ChoiceEnd,
  ChoiceOutput,
  GenerationRequest,
  GenerationWire,
  ResponseHead,
  StreamWriter,
} from './generation.ts';

export type GenerationKind = 'chat' | 'completion';

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function optionalModel(body: Record<string, unknown>): string | ApiError | undefined {
  const model = body['model'];
  if (model === undefined || model === null) return undefined;
  if (typeof model !== 'string' || model === '')
    return badRequest('model must be a string', 'model');
  return model;
}

/** Text of one chat message's `content`: a string, null, or an array of content parts. */
function contentText(content: unknown): string | undefined {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  let text = '';
  for (const part of content) {
    if (!isRecord(part)) return undefined;
    if (typeof part['text'] === 'string') text += part['text'];
  }
  return text;
}

function maxTokensOf(
  body: Record<string, unknown>,
): { value: number | undefined; field: string } | ApiError {
  for (const field of ['max_completion_tokens', 'max_tokens']) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 10_000_000) {
      return badRequest(`${field} must be a positive integer`, field);
    }
    return { value, field };
  }
  return { value: undefined, field: 'max_tokens' };
}

/** Below this temperature vLLM samples greedily (its `_SAMPLING_EPS`). */
const GREEDY_BELOW = 1e-5;
/** vLLM's default temperature when the request sets none (and the model's config neither). */
const DEFAULT_TEMPERATURE = 1;

/** `n` and `temperature`: several answers need sampling, as vLLM refuses them when greedy. */
function choicesOf(body: Record<string, unknown>): number | ApiError {
  const n = body['n'] ?? 1;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 128) {
    return badRequest('n must be an integer from 1 to 128', 'n');
  }
  const temperature = body['temperature'] ?? DEFAULT_TEMPERATURE;
  if (typeof temperature !== 'number' || temperature < 0) {
    return badRequest('temperature must be a number >= 0', 'temperature');
  }
  if (n > 1 && temperature < GREEDY_BELOW) {
    return badRequest(`n must be 1 when using greedy sampling, got ${n}.`);
  }
  return n;
}

/** `stop`: a string or a list of them. */
function stopOf(body: Record<string, unknown>): string[] | ApiError {
  const stop = body['stop'] ?? [];
  if (typeof stop === 'string') return [stop];
  if (Array.isArray(stop) && stop.every((s) => typeof s === 'string')) return stop;
  return badRequest('stop must be a string or a list of strings', 'stop');
}

/** Chat: the prompt is the messages' text contents joined by newlines. Completions: `prompt`. */
export function parseGeneration(kind: GenerationKind, body: unknown): GenerationRequest | ApiError {
  if (!isRecord(body)) return badRequest('the request body must be a JSON object', undefined);
  const model = optionalModel(body);
  if (isApiError(model)) return model;

  let promptText: string;
  if (kind === 'chat') {
    const messages = body['messages'];
    if (!Array.isArray(messages) || messages.length === 0) {
      return badRequest('messages must be a non-empty array', 'messages');
    }
    const texts: string[] = [];
    for (let i = 0; i < messages.length; i++) {
      const message: unknown = messages[i];
      const text = isRecord(message) ? contentText(message['content']) : undefined;
      if (text === undefined)
        return badRequest(`messages[${i}] is not a valid message`, 'messages');
      texts.push(text);
    }
    promptText = texts.join('\n');
  } else {
    const prompt = body['prompt'];
    if (typeof prompt === 'string') promptText = prompt;
    else if (Array.isArray(prompt) && prompt.every((p) => typeof p === 'string')) {
      promptText = prompt.join('\n');
    } else {
      return badRequest('prompt must be a string or an array of strings', 'prompt');
    }
  }

  const maxTokens = maxTokensOf(body);
  if (isApiError(maxTokens)) return maxTokens;
  const n = choicesOf(body);
  if (isApiError(n)) return n;
  const stop = stopOf(body);
  if (isApiError(stop)) return stop;

  const stream = body['stream'] ?? false;
  if (typeof stream !== 'boolean') return badRequest('stream must be a boolean', 'stream');
  const streamOptions = body['stream_options'] ?? {};
  if (!isRecord(streamOptions))
    return badRequest('stream_options must be an object', 'stream_options');
  const includeUsage = streamOptions['include_usage'] ?? false;
  if (typeof includeUsage !== 'boolean') {
    return badRequest('stream_options.include_usage must be a boolean', 'stream_options');
  }
  return {
    model,
    promptText,
    maxTokens: maxTokens.value,
    maxTokensField: maxTokens.field,
    n,
    stop,
    stream,
    includeUsage: stream && includeUsage,
  };
}

export interface EmbeddingInput {
  text: string;
  /** Token count when the input was given as token ids; undefined = estimate from `text`. */
  tokens: number | undefined;
}

export interface EmbeddingRequest {
  model: string | undefined;
  inputs: EmbeddingInput[];
  dimensions: number;
  base64: boolean;
}

export const DEFAULT_EMBEDDING_DIMENSIONS = 8;

function isTokenArray(value: unknown): value is number[] {
  return Array.isArray(value) && value.every((t) => typeof t === 'number' && Number.isInteger(t));
}

export function parseEmbedding(body: unknown): EmbeddingRequest | ApiError {
  if (!isRecord(body)) return badRequest('the request body must be a JSON object', undefined);
  const model = optionalModel(body);
  if (isApiError(model)) return model;
  const input = body['input'];
  let inputs: EmbeddingInput[];
  if (typeof input === 'string') inputs = [{ text: input, tokens: undefined }];
  else if (isTokenArray(input) && input.length > 0) {
    inputs = [{ text: input.join(','), tokens: input.length }];
  } else if (
    Array.isArray(input) &&
    input.length > 0 &&
    input.every((i) => typeof i === 'string')
  ) {
    inputs = input.map((text) => ({ text, tokens: undefined }));
  } else if (Array.isArray(input) && input.length > 0 && input.every(isTokenArray)) {
    inputs = input.map((ids) => ({ text: ids.join(','), tokens: ids.length }));
  } else {
    return badRequest('input must be a string, an array of strings, or token arrays', 'input');
  }
  const dimensions = body['dimensions'] ?? DEFAULT_EMBEDDING_DIMENSIONS;
  if (typeof dimensions !== 'number' || !Number.isInteger(dimensions) || dimensions < 1) {
    return badRequest('dimensions must be a positive integer', 'dimensions');
  }
  if (dimensions > 4096) return badRequest('dimensions must be <= 4096', 'dimensions');
  const format = body['encoding_format'] ?? 'float';
  if (format !== 'float' && format !== 'base64') {
    return badRequest("encoding_format must be 'float' or 'base64'", 'encoding_format');
  }
  return { model, inputs, dimensions, base64: format === 'base64' };
}

/**
 * vLLM's `usage`: `prompt_tokens_details` only says `cached_tokens` when some were (as vLLM
 * started with `--enable-prompt-tokens-details` does; without that flag it is always null), and a
 * stream's usage chunk drops the null details altogether.
 */
function openAiUsage(u: AnswerUsage, inStream: boolean): Record<string, unknown> {
  const usage: Record<string, unknown> = {
    prompt_tokens: u.promptTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    completion_tokens: u.completionTokens,
  };
  const details = u.cachedTokens > 0 ? { cached_tokens: u.cachedTokens } : null;
  if (!inStream) {
    usage['prompt_tokens_details'] = details;
    usage['completion_tokens_details'] = null;
  } else if (details !== null) usage['prompt_tokens_details'] = details;
  return usage;
}

/**
 * Builds the SSE events of one stream as vLLM writes them: chat opens with one role chunk per
 * choice (`delta: {role, content: ""}`, no text), then each chunk of tokens is one event, the last
 * of a choice carrying its `finish_reason` and `stop_reason` (no empty finish chunk of its own);
 * `system_fingerprint` comes once, on the finishing chunk, or on the usage chunk (`choices: []`)
 * when `stream_options.include_usage` asked for one; then `data: [DONE]`. Completions have no role
 * chunk. The invariant parts of a chunk are serialised once, so a token costs a few string
 * concatenations instead of a JSON.stringify.
 */
export class ChunkWriter implements StreamWriter {
  readonly #kind: GenerationKind;
  readonly #choiceCount: number;
  /** `data: {"id":…,"model":…,"choices":[{"index":` */
  readonly #open: string;
  /** `,"system_fingerprint":…` or '' */
  readonly #fingerprint: string;
  readonly #includeUsage: boolean;
  readonly #head: string;

  constructor(kind: GenerationKind, head: ResponseHead, includeUsage: boolean, choices = 1) {
    this.#kind = kind;
    this.#choiceCount = choices;
    const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    this.#head =
      `data: {"id":${JSON.stringify(head.id)},"object":"${object}","created":${head.created},` +
      `"model":${JSON.stringify(head.model)},"choices":`;
    this.#open = `${this.#head}[{"index":`;
    this.#fingerprint =
      head.fingerprint === undefined
        ? ''
        : `,"system_fingerprint":${JSON.stringify(head.fingerprint)}`;
    this.#includeUsage = includeUsage;
  }

  start(): string {
    if (this.#kind !== 'chat') return '';
    let out = '';
    for (let index = 0; index < this.#choiceCount; index++) {
      out +=
        `${this.#open}${index},"delta":{"role":"assistant","content":""},"logprobs":null,` +
        `"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n`;
    }
    return out;
  }

  tokens(index: number, text: string, end: ChoiceEnd | undefined): string {
    const body =
      this.#kind === 'chat'
        ? `,"delta":{"content":${JSON.stringify(text)}},"logprobs":null,`
        : `,"text":${JSON.stringify(text)},"logprobs":null,`;
    let tail: string;
    if (end === undefined) {
      tail =
        this.#kind === 'chat'
          ? '"finish_reason":null,"token_ids":null}]}'
          : '"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}';
    } else {
      const reasons = `"finish_reason":"${end.finish}","stop_reason":${JSON.stringify(end.stopReason)}`;
      const fingerprint = this.#includeUsage ? '' : this.#fingerprint;
      tail =
        this.#kind === 'chat'
          ? `${reasons},"token_ids":null}]${fingerprint}}`
          : `${reasons},"prompt_token_ids":null,"token_ids":null}]${fingerprint}}`;
    }
    return `${this.#open}${index}${body}${tail}\n\n`;
  }

  end(usage: AnswerUsage): string {
    const usageChunk = this.#includeUsage
      ? `${this.#head}[],"usage":${JSON.stringify(openAiUsage(usage, true))}${this.#fingerprint}}\n\n`
      : '';
    return `${usageChunk}data: [DONE]\n\n`;
  }
}

/** A whole answer, with vLLM's fields in vLLM's order (most of them null on this server). */
function fullResponse(
  kind: GenerationKind,
  head: ResponseHead,
  choices: readonly ChoiceOutput[],
  usage: AnswerUsage,
): Record<string, unknown> {
  const body: Record<string, unknown> = {
    id: head.id,
    object: kind === 'chat' ? 'chat.completion' : 'text_completion',
    created: head.created,
    model: head.model,
    choices: choices.map((c, index) =>
      kind === 'chat'
        ? {
            index,
            message: {
              role: 'assistant',
              content: c.text,
              refusal: null,
              annotations: null,
              audio: null,
              function_call: null,
              reasoning: null,
            },
            logprobs: null,
            finish_reason: c.finish,
            stop_reason: c.stopReason,
            token_ids: null,
            routed_experts: null,
          }
        : {
            index,
            text: c.text,
            logprobs: null,
            finish_reason: c.finish,
            stop_reason: c.stopReason,
            token_ids: null,
            prompt_logprobs: null,
            prompt_token_ids: null,
            routed_experts: null,
          },
    ),
    service_tier: null,
  };
  if (head.fingerprint !== undefined) body['system_fingerprint'] = head.fingerprint;
  body['usage'] = openAiUsage(usage, false);
  if (kind === 'chat') {
    body['prompt_logprobs'] = null;
    body['prompt_token_ids'] = null;
    body['prompt_text'] = null;
  }
  body['kv_transfer_params'] = null;
  body['ec_transfer_params'] = null;
  body['metrics'] = null;
  return body;
}

/** Chat completions (`chat`) or legacy completions (`completion`) of `n` choices. */
export function openAiGenerationWire(kind: GenerationKind, n = 1): GenerationWire {
  return {
    kind,
    idPrefix: kind === 'chat' ? 'chatcmpl' : 'cmpl',
    orca: true,
    streamWriter: (head, includeUsage) => new ChunkWriter(kind, head, includeUsage, n),
    fullBody: (head, choices, usage) => fullResponse(kind, head, choices, usage),
  };
}
