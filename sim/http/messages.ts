/**
 * Anthropic's Messages API as vLLM 0.32 serves it (test/engine/fixtures/messages*.http):
 * `POST /v1/messages`, streamed as named events (`message_start`, `content_block_start`,
 * `content_block_delta`…, `content_block_stop`, `message_delta`, `message_stop`) or whole, and
 * `POST /v1/messages/count_tokens`. Errors stay in the OpenAI shape, as vLLM's do.
 */
import type { FinishReason } from '../engine/answer.ts';
import { tokenizePrompt } from '../engine/prompt.ts';
import type { Simulator } from '../simulator.ts';
import { badRequest, isApiError, type ApiError } from './api-error.ts';
import { serveGeneration } from './generation.ts';
import type {
  AnswerUsage,
  ChoiceEnd,
  GenerationWire,
  ResponseHead,
  StreamWriter,
} from './generation.ts';
import { resolveModel } from './models.ts';
import { sendBadRequest, sendJson } from './respond.ts';
import type { Route } from './route.ts';

interface MessagesRequest {
  model: string | undefined;
  promptText: string;
  maxTokens: number | undefined;
  stream: boolean;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A string, or content blocks whose text counts (`text`, and `tool_result` content). */
function blocksText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  let text = '';
  for (const block of content) {
    if (!isRecord(block)) return undefined;
    if (typeof block['text'] === 'string') text += block['text'];
    else if (block['type'] === 'tool_result') text += blocksText(block['content']) ?? '';
    else if (block['type'] === 'tool_use') text += JSON.stringify(block['input'] ?? null);
  }
  return text;
}

/** `max_tokens` is required by Anthropic's API but not by vLLM's: optional here, as there. */
function parseMessages(body: unknown, countOnly: boolean): MessagesRequest | ApiError {
  if (!isRecord(body)) return badRequest('the request body must be a JSON object', undefined);
  const model = body['model'];
  if (model !== undefined && (typeof model !== 'string' || model === '')) {
    return badRequest('model must be a string', 'model');
  }
  const texts: string[] = [];
  const system = body['system'];
  if (system !== undefined && system !== null) {
    const text = blocksText(system);
    if (text === undefined) return badRequest('system must be a string or text blocks', 'system');
    texts.push(text);
  }
  const messages = body['messages'];
  if (!Array.isArray(messages) || messages.length === 0) {
    return badRequest('messages must be a non-empty array', 'messages');
  }
  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i];
    const text = isRecord(message) ? blocksText(message['content']) : undefined;
    if (text === undefined) return badRequest(`messages[${i}] is not a valid message`, 'messages');
    texts.push(text);
  }
  const maxTokens = body['max_tokens'];
  if (
    !countOnly &&
    maxTokens !== undefined &&
    (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1)
  ) {
    return badRequest('max_tokens must be a positive integer', 'max_tokens');
  }
  const stream = body['stream'] ?? false;
  if (typeof stream !== 'boolean') return badRequest('stream must be a boolean', 'stream');
  return {
    model: model,
    promptText: texts.join('\n'),
    maxTokens: maxTokens as number | undefined,
    stream,
  };
}

const stopReason = (finish: FinishReason) => (finish === 'length' ? 'max_tokens' : 'end_turn');

function event(type: string, data: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
}

class MessagesStreamWriter implements StreamWriter {
  readonly #head: ResponseHead;
  readonly #inputTokens: number;
  #finish: FinishReason = 'stop';

  constructor(head: ResponseHead, inputTokens: number) {
    this.#head = head;
    this.#inputTokens = inputTokens;
  }

  #delta(text: string): string {
    return event('content_block_delta', { delta: { type: 'text_delta', text }, index: 0 });
  }

  start(): string {
    const message = {
      id: this.#head.id,
      type: 'message',
      role: 'assistant',
      content: [],
      model: this.#head.model,
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: this.#inputTokens, output_tokens: 0 },
    };
    return (
      event('message_start', { message }) +
      event('content_block_start', { content_block: { type: 'text', text: '' }, index: 0 })
    );
  }

  tokens(_index: number, text: string, end: ChoiceEnd | undefined): string {
    if (end !== undefined) this.#finish = end.finish;
    return this.#delta(text);
  }

  end(usage: AnswerUsage): string {
    return (
      event('content_block_stop', { index: 0 }) +
      event('message_delta', {
        delta: { stop_reason: stopReason(this.#finish), stop_sequence: null },
        usage: { input_tokens: usage.promptTokens, output_tokens: usage.completionTokens },
      }) +
      event('message_stop', {})
    );
  }
}

function messagesWire(inputTokens: number): GenerationWire {
  return {
    kind: 'messages',
    idPrefix: 'chatcmpl',
    orca: false,
    streamWriter: (head) => new MessagesStreamWriter(head, inputTokens),
    fullBody: (head, [choice], usage) => ({
      id: head.id,
      type: 'message',
      role: 'assistant',
      content: [{ type: 'text', text: choice?.text ?? '' }],
      model: head.model,
      stop_reason: stopReason(choice?.finish ?? 'stop'),
      usage: { input_tokens: usage.promptTokens, output_tokens: usage.completionTokens },
    }),
  };
}

export function messagesRoutes(sim: Simulator): Route[] {
  return [
    {
      kind: 'json',
      path: '/v1/messages',
      inference: true,
      handle: (ex, body) => {
        const request = parseMessages(body, false);
        if (isApiError(request)) return sendBadRequest(sim, ex.res, request);
        const inputTokens = tokenizePrompt(request.promptText, sim.options()).tokens;
        serveGeneration(
          sim,
          ex,
          { ...request, maxTokensField: 'max_tokens', n: 1, stop: [], includeUsage: false },
          messagesWire(inputTokens),
        );
      },
    },
    {
      kind: 'json',
      path: '/v1/messages/count_tokens',
      inference: false,
      handle: ({ res }, body) => {
        const request = parseMessages(body, true);
        if (isApiError(request)) return sendBadRequest(sim, res, request);
        const model = resolveModel(sim, request.model);
        if (isApiError(model)) return sendBadRequest(sim, res, model);
        const tokens = tokenizePrompt(request.promptText, sim.options()).tokens;
        sendJson(res, 200, {
          input_tokens: tokens,
          context_management: { original_input_tokens: tokens },
        });
      },
    },
  ];
}
