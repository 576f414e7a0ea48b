/**
 * OpenAI's Responses API as vLLM 0.32 answers it (test/engine/fixtures/responses*.http): the
 * request's parts the simulator reads, the `response` object, and the stream's named events
 * (`event:` + `data:`, each with a `sequence_number`, no `[DONE]`).
 */
import type { FinishReason } from '../engine/answer.ts';
import { badRequest, type ApiError } from './api-error.ts';
import type {
  AnswerUsage,
  ChoiceEnd,
  GenerationWire,
  ResponseHead,
  StreamWriter,
} from './generation.ts';

export interface ResponsesRequest {
  model: string | undefined;
  /** The text of `instructions` and `input`, in the order the model reads them. */
  inputText: string;
  instructions: string | null;
  maxOutputTokens: number | undefined;
  temperature: number;
  stream: boolean;
  /** Keep the answer for `GET /v1/responses/{id}` and `previous_response_id` (default true). */
  store: boolean;
  previousResponseId: string | null;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The text of one input item's `content`: a string or `input_text`/`output_text` parts. */
function itemText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  let text = '';
  for (const part of content) {
    if (isRecord(part) && typeof part['text'] === 'string') text += part['text'];
  }
  return text;
}

export function parseResponsesRequest(body: unknown): ResponsesRequest | ApiError {
  if (!isRecord(body)) return badRequest('the request body must be a JSON object', undefined);
  const model = body['model'];
  if (model !== undefined && (typeof model !== 'string' || model === '')) {
    return badRequest('model must be a string', 'model');
  }
  const instructions = body['instructions'] ?? null;
  if (instructions !== null && typeof instructions !== 'string') {
    return badRequest('instructions must be a string', 'instructions');
  }
  const input = body['input'];
  const texts: string[] = instructions === null ? [] : [instructions];
  if (typeof input === 'string') texts.push(input);
  else if (Array.isArray(input)) {
    for (let i = 0; i < input.length; i++) {
      const item: unknown = input[i];
      const text = isRecord(item) ? itemText(item['content'] ?? item['output'] ?? '') : undefined;
      if (text === undefined) return badRequest(`input[${i}] is not a valid input item`, 'input');
      texts.push(text);
    }
  } else return badRequest('input must be a string or an array of input items', 'input');
  const max = body['max_output_tokens'] ?? undefined;
  if (max !== undefined && (typeof max !== 'number' || !Number.isInteger(max) || max < 1)) {
    return badRequest('max_output_tokens must be a positive integer', 'max_output_tokens');
  }
  const temperature = body['temperature'] ?? 1;
  if (typeof temperature !== 'number')
    return badRequest('temperature must be a number', 'temperature');
  const stream = body['stream'] ?? false;
  if (typeof stream !== 'boolean') return badRequest('stream must be a boolean', 'stream');
  const store = body['store'] ?? true;
  if (typeof store !== 'boolean') return badRequest('store must be a boolean', 'store');
  const previous = body['previous_response_id'] ?? null;
  if (previous !== null && typeof previous !== 'string') {
    return badRequest('previous_response_id must be a string', 'previous_response_id');
  }
  return {
    model: model,
    inputText: texts.join('\n'),
    instructions,
    maxOutputTokens: max,
    temperature,
    stream,
    store,
    previousResponseId: previous,
  };
}

/** vLLM's answer for an id it does not hold: a 404 whose `code` is the status as a number. */
export function responseNotFoundBody(id: string): unknown {
  return {
    error: {
      message: `Response with id '${id}' not found.`,
      type: 'invalid_request_error',
      param: 'response_id',
      code: 404,
    },
  };
}

export type ResponseObject = Record<string, unknown>;

function usageOf(u: AnswerUsage | null): unknown {
  if (u === null) return null;
  return {
    input_tokens: u.promptTokens,
    input_tokens_details: {
      cached_tokens: u.cachedTokens,
      cache_write_tokens: 0,
      input_tokens_per_turn: [],
      cached_tokens_per_turn: [],
    },
    output_tokens: u.completionTokens,
    output_tokens_details: {
      reasoning_tokens: 0,
      tool_output_tokens: 0,
      output_tokens_per_turn: [],
      tool_output_tokens_per_turn: [],
    },
    total_tokens: u.promptTokens + u.completionTokens,
  };
}

/** The message item holding the answer's text. */
function messageItem(itemId: string, text: string, status: string): Record<string, unknown> {
  return {
    id: itemId,
    content:
      status === 'in_progress'
        ? []
        : [{ annotations: [], text, type: 'output_text', logprobs: null }],
    role: 'assistant',
    status,
    type: 'message',
    phase: null,
  };
}

/** The `response` object, in vLLM's field order (the id first, which routers rely on). */
function responseObject(
  head: ResponseHead,
  request: ResponsesRequest,
  output: unknown[],
  status: 'in_progress' | 'completed' | 'incomplete',
  usage: AnswerUsage | null,
): ResponseObject {
  return {
    id: head.id,
    created_at: head.created,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: request.instructions,
    metadata: null,
    model: head.model,
    object: 'response',
    output,
    parallel_tool_calls: true,
    temperature: request.temperature,
    tool_choice: 'none',
    tools: [],
    top_p: 1.0,
    background: false,
    max_output_tokens: request.maxOutputTokens ?? null,
    max_tool_calls: null,
    previous_response_id: request.previousResponseId,
    prompt: null,
    reasoning: null,
    service_tier: 'auto',
    status,
    text: null,
    top_logprobs: null,
    truncation: 'disabled',
    usage: usageOf(usage),
    user: null,
    presence_penalty: 0,
    frequency_penalty: 0,
    kv_transfer_params: null,
    ec_transfer_params: null,
    input_messages: null,
    output_messages: null,
  };
}

const finalStatus = (finish: FinishReason) => (finish === 'length' ? 'incomplete' : 'completed');

/** A stream's events, numbered; the finished response goes to `onDone` (for the store). */
class ResponsesStreamWriter implements StreamWriter {
  readonly #head: ResponseHead;
  readonly #request: ResponsesRequest;
  readonly #itemId: string;
  readonly #onDone: (response: ResponseObject) => void;
  #sequence = 0;
  #text = '';
  #finish: FinishReason = 'stop';

  constructor(
    head: ResponseHead,
    request: ResponsesRequest,
    onDone: (response: ResponseObject) => void,
  ) {
    this.#head = head;
    this.#request = request;
    this.#itemId = `msg_${head.id}`;
    this.#onDone = onDone;
  }

  #event(type: string, fields: Record<string, unknown>): string {
    const data = JSON.stringify({ ...fields, sequence_number: this.#sequence++, type });
    return `event: ${type}\ndata: ${data}\n\n`;
  }

  #delta(text: string): string {
    this.#text += text;
    return this.#event('response.output_text.delta', {
      content_index: 0,
      delta: text,
      item_id: this.#itemId,
      logprobs: [],
      output_index: 0,
    });
  }

  start(): string {
    const created = responseObject(this.#head, this.#request, [], 'in_progress', null);
    return (
      this.#event('response.created', { response: created }) +
      this.#event('response.in_progress', { response: created }) +
      this.#event('response.output_item.added', {
        item: messageItem(this.#itemId, '', 'in_progress'),
        output_index: 0,
      }) +
      this.#event('response.content_part.added', {
        content_index: 0,
        item_id: this.#itemId,
        output_index: 0,
        part: { annotations: [], text: '', type: 'output_text', logprobs: [] },
      })
    );
  }

  tokens(_index: number, text: string, end: ChoiceEnd | undefined): string {
    if (end !== undefined) this.#finish = end.finish;
    return this.#delta(text);
  }

  end(usage: AnswerUsage): string {
    const text = this.#text;
    const item = messageItem(this.#itemId, text, 'completed');
    const done = responseObject(
      this.#head,
      this.#request,
      [item],
      finalStatus(this.#finish),
      usage,
    );
    this.#onDone(done);
    return (
      this.#event('response.output_text.done', {
        content_index: 0,
        item_id: this.#itemId,
        logprobs: [],
        output_index: 0,
        text,
      }) +
      this.#event('response.content_part.done', {
        content_index: 0,
        item_id: this.#itemId,
        output_index: 0,
        part: { annotations: [], text, type: 'output_text', logprobs: null },
      }) +
      this.#event('response.output_item.done', { item, output_index: 0 }) +
      this.#event('response.completed', { response: done })
    );
  }
}

/** The wire of one Responses request; `onDone` receives the finished response object. */
export function responsesWire(
  request: ResponsesRequest,
  onDone: (response: ResponseObject, text: string) => void,
): GenerationWire {
  return {
    kind: 'responses',
    idPrefix: 'resp',
    orca: false,
    streamWriter: (head) =>
      new ResponsesStreamWriter(head, request, (response) =>
        onDone(response, outputText(response)),
      ),
    fullBody: (head, [choice], usage) => {
      const text = choice?.text ?? '';
      const item = messageItem(`msg_${head.id}`, text, 'completed');
      const status = finalStatus(choice?.finish ?? 'stop');
      const response = responseObject(head, request, [item], status, usage);
      onDone(response, text);
      return response;
    },
  };
}

function outputText(response: ResponseObject): string {
  const item = (response['output'] as { content?: { text?: string }[] }[])[0];
  return item?.content?.[0]?.text ?? '';
}
