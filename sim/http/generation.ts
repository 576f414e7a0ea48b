/**
 * The flow every generating route shares, whatever its wire format: the served model, the context
 * length, the injected faults, the engine's room, the answers, a stall's or a stream's early
 * headers, and admission to the engine with a sink that writes the tokens as they come due. A
 * route parses its body into a `GenerationRequest` and passes the `GenerationWire` of its format:
 * OpenAI's chat and legacy completions (openai-wire.ts), the Responses API (responses-wire.ts) and
 * Anthropic's Messages (messages.ts).
 */
import type { ServerResponse } from 'node:http';
import { Answer } from '../engine/answer.ts';
import type { FinishReason } from '../engine/answer.ts';
import type { JobSink } from '../engine/engine.ts';
import { tokenizePrompt } from '../engine/prompt.ts';
import type { Simulator } from '../simulator.ts';
import {
  contextLengthExceeded,
  injectedRateLimit,
  injectedServerError,
  isApiError,
  maxTokensTooLarge,
  queueFull,
  RETRY_AFTER,
} from './api-error.ts';
import { orcaHeaders } from './load-report.ts';
import { adapterOf, resolveModel } from './models.ts';
import { sendBadRequest, sendError, sendJson } from './respond.ts';
import type { Exchange } from './route.ts';

/** A generation request, parsed from whichever format it came in. */
export interface GenerationRequest {
  /** The requested model, if the body named one. */
  model: string | undefined;
  /** The text the prompt is made of (its length gives the tokens, its prefix the cache blocks). */
  promptText: string;
  /** The requested maximum of output tokens; undefined: the answer's own length. */
  maxTokens: number | undefined;
  /** The field `maxTokens` came from (`max_tokens`, `max_output_tokens`), for vLLM's 400. */
  maxTokensField: string;
  /** Answers wanted (`n`), each a choice of its own; 1 where the API has no `n`. */
  n: number;
  /** Stop strings: each answer ends before the first it produces. */
  stop: readonly string[];
  stream: boolean;
  /** A stream ends with a usage event. */
  includeUsage: boolean;
}

/** Identity of one response, repeated in every chunk. */
export interface ResponseHead {
  id: string;
  /** Unix seconds. */
  created: number;
  model: string;
  fingerprint: string | undefined;
}

/** Token accounting of one answer (all its choices). */
export interface AnswerUsage {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
}

/** How one choice ended. */
export interface ChoiceEnd {
  finish: FinishReason;
  /** The stop string that ended it, or null. */
  stopReason: string | null;
}

/** One choice of a whole answer. */
export interface ChoiceOutput extends ChoiceEnd {
  text: string;
}

/** The bytes of one streamed answer. */
export interface StreamWriter {
  /** What opens the stream, written with the first tokens (chat: a role chunk per choice). */
  start(): string;
  /** One chunk of choice `index`'s tokens; `end` is set on its last one. */
  tokens(index: number, text: string, end: ChoiceEnd | undefined): string;
  /** The closing events, once every choice ended: usage when it was asked for, the end marker. */
  end(usage: AnswerUsage): string;
}

/** How one API format writes a generation. */
export interface GenerationWire {
  /** Names the route in logs. */
  readonly kind: string;
  /** Response ids are `<idPrefix>-sim<port>-<n>`. */
  readonly idPrefix: string;
  /**
   * A whole answer gets vLLM's ORCA load header when the request asks for one (vLLM adds it to
   * chat and completions only, not to Responses or Messages).
   */
  readonly orca: boolean;
  streamWriter(head: ResponseHead, includeUsage: boolean): StreamWriter;
  /** A whole (non-streaming) answer, as one JSON body. */
  fullBody(head: ResponseHead, choices: readonly ChoiceOutput[], usage: AnswerUsage): unknown;
}

export function serveGeneration(
  sim: Simulator,
  ex: Exchange,
  request: GenerationRequest,
  wire: GenerationWire,
): void {
  const res = ex.res;
  const model = resolveModel(sim, request.model);
  if (isApiError(model)) return sendBadRequest(sim, res, model);
  const o = sim.options();
  const prompt = tokenizePrompt(request.promptText, o);
  // vLLM validates the lengths before the request reaches its engine: no fault is drawn for it.
  if (o.maxModelLen !== undefined) {
    if (request.maxTokens !== undefined && request.maxTokens > o.maxModelLen) {
      const e = maxTokensTooLarge(request.maxTokensField, request.maxTokens, o.maxModelLen);
      return sendBadRequest(sim, res, e);
    }
    if (prompt.tokens >= o.maxModelLen) {
      return sendBadRequest(sim, res, contextLengthExceeded(o.maxModelLen, prompt.tokens));
    }
  }

  const fault = sim.engine.drawFault();
  if (fault.kind === 'error') {
    sim.log.debug({ kind: wire.kind }, 'injected error');
    return sendError(res, injectedServerError());
  }
  if (fault.kind === 'rate-limit') {
    sim.log.debug({ kind: wire.kind }, 'injected rate limit');
    return sendError(res, injectedRateLimit(), RETRY_AFTER);
  }
  const room = sim.engine.checkRoom();
  if (room.kind === 'full') return sendError(res, queueFull(room.slots, room.queued), RETRY_AFTER);

  const limits = {
    maxTokens: request.maxTokens,
    roomTokens: o.maxModelLen === undefined ? undefined : o.maxModelLen - prompt.tokens,
    stop: request.stop,
  };
  const answers = Array.from(
    { length: request.n },
    (_, choice) => new Answer(request.promptText, limits, o.seed, choice),
  );
  const head: ResponseHead = {
    id: `${wire.idPrefix}-sim${sim.port}-${sim.nextSeq()}`,
    created: Math.floor(Date.now() / 1000),
    model,
    fingerprint: o.fingerprint,
  };
  const stall = fault.kind === 'stall';
  if (stall) sim.log.debug({ kind: wire.kind }, 'injected stall');
  // A stream's headers go out at admission, before it leaves the queue, as real servers do; a
  // stall's too, so that it looks like a hung worker rather than a busy one.
  if (request.stream || stall) {
    res.writeHead(200, {
      'content-type': request.stream ? 'text/event-stream; charset=utf-8' : 'application/json',
    });
    res.flushHeaders();
  }
  let completionTokens = 0;
  for (const answer of answers) completionTokens += answer.outputTokens;
  const usage = (cachedTokens: number): AnswerUsage => ({
    promptTokens: prompt.tokens,
    completionTokens,
    cachedTokens,
  });
  const orcaFormat = wire.orca ? headerValue(ex.req.headers[ORCA_REQUEST_HEADER]) : undefined;
  const sink = request.stream
    ? streamSink(res, answers, wire.streamWriter(head, request.includeUsage), usage)
    : wholeSink(
        res,
        answers,
        (choices, cachedTokens) => wire.fullBody(head, choices, usage(cachedTokens)),
        // The load when the answer is complete, as vLLM computes it for the response.
        () => orcaHeaders(sim, orcaFormat),
      );
  ex.job = sim.engine.admit(
    {
      promptTokens: prompt.tokens,
      blockKeys: prompt.blockKeys,
      // The choices of one request decode side by side in its slot: as long as the longest.
      outputTokens: Math.max(...answers.map((a) => a.outputTokens)),
      stream: request.stream,
      stall,
      adapter: adapterOf(sim, model),
    },
    sink,
  );
}

const endOf = (answer: Answer): ChoiceEnd => ({
  finish: answer.finish,
  stopReason: answer.stopReason,
});

/**
 * One write a delivery: the stream's opening with the first one, then each choice's tokens, the
 * first alone in its chunk, then chunks of the engine's size, a choice's last chunk carrying how it
 * ended.
 */
function streamSink(
  res: ServerResponse,
  answers: readonly Answer[],
  writer: StreamWriter,
  usage: (cachedTokens: number) => AnswerUsage,
): JobSink {
  const pending = answers.map(() => '');
  let started = false;
  return {
    tokens(from, to, tokensPerChunk) {
      let out = '';
      if (!started) {
        started = true;
        out += writer.start();
      }
      for (let i = from; i < to; i++) {
        for (let c = 0; c < answers.length; c++) {
          const answer = answers[c] as Answer;
          const last = answer.outputTokens - 1;
          if (i > last) continue;
          pending[c] += answer.token(i);
          if (i === 0 || i % tokensPerChunk === 0 || i === to - 1 || i === last) {
            out += writer.tokens(c, pending[c] as string, i === last ? endOf(answer) : undefined);
            pending[c] = '';
          }
        }
      }
      if (out !== '') res.write(out);
    },
    complete(cachedTokens) {
      res.end(writer.end(usage(cachedTokens)));
    },
    stopped() {
      res.destroy();
    },
  };
}

/** The texts grow with each delivery; the answer goes out whole at the end. */
function wholeSink(
  res: ServerResponse,
  answers: readonly Answer[],
  body: (choices: ChoiceOutput[], cachedTokens: number) => unknown,
  headers: () => Record<string, string>,
): JobSink {
  const texts = answers.map(() => '');
  return {
    tokens(from, to) {
      for (let c = 0; c < answers.length; c++) {
        const answer = answers[c] as Answer;
        const upto = Math.min(to, answer.outputTokens);
        for (let i = from; i < upto; i++) texts[c] += answer.token(i);
      }
    },
    complete(cachedTokens) {
      const choices = answers.map((a, c) => ({ text: texts[c] as string, ...endOf(a) }));
      sendJson(res, 200, body(choices, cachedTokens), headers());
    },
    stopped() {
      res.destroy();
    },
  };
}

/** The ORCA request header (`endpoint-load-metrics-format`). */
const ORCA_REQUEST_HEADER = 'endpoint-load-metrics-format';

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
