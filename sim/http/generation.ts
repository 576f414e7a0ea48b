/**
 * The flow every generating route shares, whatever its wire format: the served model, the injected
 * faults, the engine's room, the answer, a stall's or a stream's early headers, and admission to
 * the engine with a sink that writes the tokens as they come due. A route parses its body into a
 * `GenerationRequest` and passes the `GenerationWire` of its format: OpenAI's chat and legacy
 * completions today (completions.ts); the Responses or Messages API would be two more wires.
 */
import type { ServerResponse } from 'node:http';
import { Answer } from '../engine/answer.ts';
import type { FinishReason } from '../engine/answer.ts';
import type { JobSink } from '../engine/engine.ts';
import { tokenizePrompt } from '../engine/prompt.ts';
import type { Simulator } from '../simulator.ts';
import {
  injectedRateLimit,
  injectedServerError,
  isApiError,
  queueFull,
  RETRY_AFTER,
} from './api-error.ts';
import { orcaHeaders } from './load-report.ts';
import { resolveModel } from './models.ts';
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

/** Token accounting of one answer. */
export interface AnswerUsage {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
}

/** The bytes of one streamed answer. */
export interface StreamWriter {
  /** The event of the first token (alone in its chunk). */
  first(text: string): string;
  /** The event of one chunk of further tokens. */
  token(text: string): string;
  /** The closing events: the finish reason, usage when it was asked for, the end marker. */
  end(finish: FinishReason, usage: AnswerUsage): string;
}

/** How one API format writes a generation. */
export interface GenerationWire {
  /** Names the route in logs. */
  readonly kind: string;
  /** Response ids are `<idPrefix>-sim<port>-<n>`. */
  readonly idPrefix: string;
  streamWriter(head: ResponseHead, includeUsage: boolean): StreamWriter;
  /** A whole (non-streaming) answer, as one JSON body. */
  fullBody(head: ResponseHead, text: string, finish: FinishReason, usage: AnswerUsage): unknown;
}

export function serveGeneration(
  sim: Simulator,
  ex: Exchange,
  request: GenerationRequest,
  wire: GenerationWire,
): void {
  const res = ex.res;
  const model = resolveModel(sim.options(), request.model);
  if (isApiError(model)) return sendBadRequest(sim, res, model);

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

  const o = sim.options();
  const prompt = tokenizePrompt(request.promptText, o);
  const answer = new Answer(request.promptText, request.maxTokens, o.seed);
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
      'cache-control': 'no-cache',
    });
    res.flushHeaders();
  }
  const usage = (cachedTokens: number): AnswerUsage => ({
    promptTokens: prompt.tokens,
    completionTokens: answer.outputTokens,
    cachedTokens,
  });
  const sink = request.stream
    ? streamSink(res, answer, wire.streamWriter(head, request.includeUsage), usage)
    : wholeSink(
        res,
        answer,
        (text, cachedTokens) => wire.fullBody(head, text, answer.finish, usage(cachedTokens)),
        // The load when the answer is complete, as vLLM computes it for the response.
        () => orcaHeaders(sim, headerValue(ex.req.headers[ORCA_REQUEST_HEADER])),
      );
  ex.job = sim.engine.admit(
    {
      promptTokens: prompt.tokens,
      blockKeys: prompt.blockKeys,
      outputTokens: answer.outputTokens,
      stream: request.stream,
      stall,
    },
    sink,
  );
}

/** One write a delivery: the first token alone in its chunk, then chunks of the engine's size. */
function streamSink(
  res: ServerResponse,
  answer: Answer,
  writer: StreamWriter,
  usage: (cachedTokens: number) => AnswerUsage,
): JobSink {
  return {
    tokens(from, to, tokensPerChunk) {
      let out = '';
      let pending = '';
      for (let i = from; i < to; i++) {
        const text = answer.token(i);
        if (i === 0) out += writer.first(text);
        else {
          pending += text;
          if (i % tokensPerChunk === 0 || i === to - 1) {
            out += writer.token(pending);
            pending = '';
          }
        }
      }
      if (out !== '') res.write(out);
    },
    complete(cachedTokens) {
      res.end(writer.end(answer.finish, usage(cachedTokens)));
    },
    stopped() {
      res.destroy();
    },
  };
}

/** The text grows with each delivery; the answer goes out whole at the end. */
function wholeSink(
  res: ServerResponse,
  answer: Answer,
  body: (text: string, cachedTokens: number) => unknown,
  headers: () => Record<string, string>,
): JobSink {
  let text = '';
  return {
    tokens(from, to) {
      for (let i = from; i < to; i++) text += answer.token(i);
    },
    complete(cachedTokens) {
      sendJson(res, 200, body(text, cachedTokens), headers());
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
