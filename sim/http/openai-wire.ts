/**
 * OpenAI's wire format as far as the simulator speaks it: request parsing and validation,
 * response objects and SSE chunks (errors: api-error.ts).
 */
import type { FinishReason } from '../engine/answer.ts';
import { badRequest, isApiError } from './api-error.ts';
import type { ApiError } from './api-error.ts';
import type {
  AnswerUsage,
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

function maxTokensOf(body: Record<string, unknown>): number | ApiError | undefined {
  for (const field of ['max_completion_tokens', 'max_tokens']) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 10_000_000) {
      return badRequest(`${field} must be a positive integer`, field);
    }
    return value;
  }
  return undefined;
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

  const stream = body['stream'] ?? false;
  if (typeof stream !== 'boolean') return badRequest('stream must be a boolean', 'stream');
  const streamOptions = body['stream_options'] ?? {};
  if (!isRecord(streamOptions))
    return badRequest('stream_options must be an object', 'stream_options');
  const includeUsage = streamOptions['include_usage'] ?? false;
  if (typeof includeUsage !== 'boolean') {
    return badRequest('stream_options.include_usage must be a boolean', 'stream_options');
  }
  return { model, promptText, maxTokens, stream, includeUsage: stream && includeUsage };
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

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

function openAiUsage(u: AnswerUsage): Usage {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedTokens },
  };
}

/**
 * Builds the SSE events of one stream. The invariant parts of a chunk are serialised once, so a
 * token costs one string concatenation instead of a JSON.stringify.
 */
export class ChunkWriter implements StreamWriter {
  readonly #kind: GenerationKind;
  readonly #head: string;
  readonly #open: string;
  readonly #includeUsage: boolean;
  readonly #usageNull: string;

  constructor(kind: GenerationKind, head: ResponseHead, includeUsage: boolean) {
    this.#kind = kind;
    const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    const fp =
      head.fingerprint === undefined
        ? ''
        : `,"system_fingerprint":${JSON.stringify(head.fingerprint)}`;
    this.#head =
      `data: {"id":${JSON.stringify(head.id)},"object":"${object}","created":${head.created},` +
      `"model":${JSON.stringify(head.model)}${fp},"choices":`;
    this.#open = this.#head + (kind === 'chat' ? '[{"index":0,"delta":' : '[{"text":');
    this.#includeUsage = includeUsage;
    this.#usageNull = includeUsage ? ',"usage":null' : '';
  }

  #chunk(deltaOrText: string, finish: FinishReason | undefined): string {
    const reason = finish === undefined ? 'null' : `"${finish}"`;
    const rest =
      this.#kind === 'chat'
        ? `,"logprobs":null,"finish_reason":${reason}}]`
        : `,"index":0,"logprobs":null,"finish_reason":${reason}}]`;
    return this.#open + deltaOrText + rest + this.#usageNull + '}\n\n';
  }

  /** The first token's chunk (chat: carries `delta.role`). */
  first(text: string): string {
    return this.#kind === 'chat'
      ? this.#chunk(`{"role":"assistant","content":${JSON.stringify(text)}}`, undefined)
      : this.#chunk(JSON.stringify(text), undefined);
  }

  token(text: string): string {
    return this.#kind === 'chat'
      ? this.#chunk(`{"content":${JSON.stringify(text)}}`, undefined)
      : this.#chunk(JSON.stringify(text), undefined);
  }

  /** The finish chunk (an empty delta), the usage chunk when asked for, then `[DONE]`. */
  end(finish: FinishReason, usage: AnswerUsage): string {
    let tail = this.#chunk(this.#kind === 'chat' ? '{}' : '""', finish);
    if (this.#includeUsage) {
      tail += this.#head + `[],"usage":${JSON.stringify(openAiUsage(usage))}}\n\n`;
    }
    return tail + 'data: [DONE]\n\n';
  }
}

function fullResponse(
  kind: GenerationKind,
  head: ResponseHead,
  text: string,
  finish: FinishReason,
  u: Usage,
): Record<string, unknown> {
  const base: Record<string, unknown> = {
    id: head.id,
    object: kind === 'chat' ? 'chat.completion' : 'text_completion',
    created: head.created,
    model: head.model,
  };
  if (head.fingerprint !== undefined) base['system_fingerprint'] = head.fingerprint;
  base['choices'] =
    kind === 'chat'
      ? [
          {
            index: 0,
            message: { role: 'assistant', content: text, refusal: null },
            logprobs: null,
            finish_reason: finish,
          },
        ]
      : [{ text, index: 0, logprobs: null, finish_reason: finish }];
  base['usage'] = u;
  return base;
}

/** Chat completions (`chat`) or legacy completions (`completion`): one format, two shapes. */
export function openAiGenerationWire(kind: GenerationKind): GenerationWire {
  return {
    kind,
    idPrefix: kind === 'chat' ? 'chatcmpl' : 'cmpl',
    streamWriter: (head, includeUsage) => new ChunkWriter(kind, head, includeUsage),
    fullBody: (head, text, finish, usage) =>
      fullResponse(kind, head, text, finish, openAiUsage(usage)),
  };
}
