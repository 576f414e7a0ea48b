/**
 * vLLM's scoring endpoints for cross-encoder models: rerank (`/rerank`, `/v1/rerank`,
 * `/v2/rerank`: a query against documents, the most relevant first) and score (`/score`,
 * `/v1/score`: `text_1` against each `text_2`). Scores are a hash of the two texts, in [0, 1):
 * deterministic, and meaningless, as a router needs them to be.
 */
import { hashString32 } from '../engine/hash.ts';
import { estimateTokens } from '../engine/prompt.ts';
import type { Simulator } from '../simulator.ts';
import { isApiError, type ApiError } from './api-error.ts';
import { resolveModel } from './models.ts';
import { sendBadRequest, sendJson } from './respond.ts';
import type { Route } from './route.ts';

function invalid(message: string, param: string | undefined): ApiError {
  return { status: 400, message, type: 'invalid_request_error', code: 'invalid_value', param };
}

function relevance(a: string, b: string, seed: number): number {
  return hashString32(`${a}\u0000${b}`, seed) / 2 ** 32;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const strings = (value: unknown): string[] | undefined =>
  typeof value === 'string'
    ? [value]
    : Array.isArray(value) && value.every((v) => typeof v === 'string')
      ? value
      : undefined;

export function rerankRoutes(sim: Simulator): Route[] {
  const model = (body: Record<string, unknown>) =>
    resolveModel(sim.options(), typeof body['model'] === 'string' ? body['model'] : undefined);
  const tokens = (texts: string[]) =>
    texts.reduce((n, t) => n + estimateTokens(t.length, sim.options()), 0);

  const rerank = (path: string): Route => ({
    kind: 'json',
    path,
    inference: true,
    handle: ({ res }, body) => {
      if (!isRecord(body))
        return sendBadRequest(sim, res, invalid('the body must be an object', undefined));
      const served = model(body);
      if (isApiError(served)) return sendBadRequest(sim, res, served);
      const query = body['query'];
      const documents = strings(body['documents']);
      if (typeof query !== 'string')
        return sendBadRequest(sim, res, invalid('query must be a string', 'query'));
      if (documents === undefined) {
        return sendBadRequest(
          sim,
          res,
          invalid('documents must be a list of strings', 'documents'),
        );
      }
      const topN = typeof body['top_n'] === 'number' ? body['top_n'] : documents.length;
      const results = documents
        .map((text, index) => ({
          index,
          document: { text },
          relevance_score: relevance(query, text, sim.options().seed),
        }))
        .sort((a, b) => b.relevance_score - a.relevance_score)
        .slice(0, Math.max(0, topN));
      sendJson(res, 200, {
        id: `rerank-sim${sim.port}-${sim.nextSeq()}`,
        model: served,
        usage: { total_tokens: tokens([query, ...documents]) },
        results,
      });
    },
  });

  const score = (path: string): Route => ({
    kind: 'json',
    path,
    inference: true,
    handle: ({ res }, body) => {
      if (!isRecord(body))
        return sendBadRequest(sim, res, invalid('the body must be an object', undefined));
      const served = model(body);
      if (isApiError(served)) return sendBadRequest(sim, res, served);
      const first = body['text_1'];
      const seconds = strings(body['text_2']);
      if (typeof first !== 'string')
        return sendBadRequest(sim, res, invalid('text_1 must be a string', 'text_1'));
      if (seconds === undefined) {
        return sendBadRequest(
          sim,
          res,
          invalid('text_2 must be a string or a list of strings', 'text_2'),
        );
      }
      const promptTokens = tokens([first, ...seconds]);
      sendJson(res, 200, {
        id: `score-sim${sim.port}-${sim.nextSeq()}`,
        object: 'list',
        created: Math.floor(Date.now() / 1000),
        model: served,
        data: seconds.map((text, index) => ({
          index,
          object: 'score',
          score: relevance(first, text, sim.options().seed),
        })),
        usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
      });
    },
  });

  return [
    rerank('/rerank'),
    rerank('/v1/rerank'),
    rerank('/v2/rerank'),
    score('/score'),
    score('/v1/score'),
  ];
}
