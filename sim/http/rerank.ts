/**
 * vLLM's scoring endpoints for cross-encoder models: rerank (`/rerank`, `/v1/rerank`,
 * `/v2/rerank`: a query against documents, the most relevant first) and score (`/score`,
 * `/v1/score`: `text_1` against each `text_2`). Scores are a hash of the two texts, in [0, 1):
 * deterministic, and meaningless, as a router needs them to be.
 */
import { hashString32 } from '../engine/hash.ts';
import { estimateTokens } from '../engine/prompt.ts';
import type { Simulator } from '../simulator.ts';
import { badRequest, isApiError, type ApiError } from './api-error.ts';
import { resolveModel } from './models.ts';
import { sendBadRequest, sendJson } from './respond.ts';
import type { Route } from './route.ts';

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

/** Both endpoints' request, checked: one text scored against each of the others. */
interface Scoring {
  body: Record<string, unknown>;
  served: string;
  /** `query`, `text_1` */
  text: string;
  /** `documents`, `text_2` (a single string is a list of one) */
  others: string[];
}

export function rerankRoutes(sim: Simulator): Route[] {
  const model = (body: Record<string, unknown>) =>
    resolveModel(sim, typeof body['model'] === 'string' ? body['model'] : undefined);
  const tokens = (texts: string[]) =>
    texts.reduce((n, t) => n + estimateTokens(t.length, sim.options()), 0);

  /**
   * Both endpoints' checks, in the order each answers its first failure: an object body, its
   * model, `textField` a string, then `othersField` (described as `othersAre` when it is not).
   */
  const scoring = (
    body: unknown,
    textField: string,
    othersField: string,
    othersAre: string,
  ): Scoring | ApiError => {
    if (!isRecord(body)) return badRequest('the body must be an object', undefined);
    const served = model(body);
    if (isApiError(served)) return served;
    const text = body[textField];
    if (typeof text !== 'string') return badRequest(`${textField} must be a string`, textField);
    const others = strings(body[othersField]);
    if (others === undefined) return badRequest(`${othersField} must be ${othersAre}`, othersField);
    return { body, served, text, others };
  };

  const rerank = (path: string): Route => ({
    kind: 'json',
    path,
    inference: true,
    handle: ({ res }, json) => {
      const request = scoring(json, 'query', 'documents', 'a list of strings');
      if (isApiError(request)) return sendBadRequest(sim, res, request);
      const { body, served, text: query, others: documents } = request;
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
    handle: ({ res }, json) => {
      const request = scoring(json, 'text_1', 'text_2', 'a string or a list of strings');
      if (isApiError(request)) return sendBadRequest(sim, res, request);
      const { served, text: first, others: seconds } = request;
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
