/**
 * `POST /v1/embeddings`: deterministic unit vectors, after a slot and a prefill like any request
 * (no fault injection, no prefix cache).
 */
import { embeddingVector } from '../engine/embedding.ts';
import { estimateTokens } from '../engine/prompt.ts';
import type { Simulator } from '../simulator.ts';
import { isApiError, queueFull, RETRY_AFTER } from './api-error.ts';
import { adapterOf, resolveModel } from './models.ts';
import { parseEmbedding } from './openai-wire.ts';
import type { EmbeddingRequest } from './openai-wire.ts';
import { sendBadRequest, sendError, sendJson } from './respond.ts';
import type { Exchange, Route } from './route.ts';

function serveEmbeddings(sim: Simulator, ex: Exchange, body: unknown): void {
  const res = ex.res;
  const request = parseEmbedding(body);
  if (isApiError(request)) return sendBadRequest(sim, res, request);
  const model = resolveModel(sim, request.model);
  if (isApiError(model)) return sendBadRequest(sim, res, model);
  const room = sim.engine.checkRoom();
  if (room.kind === 'full') return sendError(res, queueFull(room.slots, room.queued), RETRY_AFTER);
  let promptTokens = 0;
  for (const input of request.inputs) {
    promptTokens += input.tokens ?? estimateTokens(input.text.length, sim.options());
  }
  sim.nextSeq(); // embeddings take a number too, though their answer carries no id
  ex.job = sim.engine.admit(
    {
      promptTokens,
      blockKeys: [],
      outputTokens: 0,
      stream: false,
      stall: false,
      adapter: adapterOf(sim, model),
    },
    {
      tokens: () => {},
      complete: () => {
        sendJson(res, 200, embeddingsBody(request, model, promptTokens, sim.options().seed));
      },
      stopped: () => {
        res.destroy();
      },
    },
  );
}

function embeddingsBody(
  request: EmbeddingRequest,
  model: string,
  promptTokens: number,
  seed: number,
): unknown {
  const data = request.inputs.map((input, index) => {
    const vector = embeddingVector(input.text, request.dimensions, seed);
    return {
      object: 'embedding',
      index,
      embedding: request.base64
        ? Buffer.from(vector.buffer).toString('base64')
        : Array.from(vector),
    };
  });
  return {
    object: 'list',
    data,
    model,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
}

export function embeddingsRoutes(sim: Simulator): Route[] {
  return [
    {
      kind: 'json',
      path: '/v1/embeddings',
      inference: true,
      handle: (ex, body) => serveEmbeddings(sim, ex, body),
    },
  ];
}
