/**
 * OpenAI's generation endpoints: `POST /v1/chat/completions` and `POST /v1/completions`.
 */
import type { Simulator } from '../simulator.ts';
import { isApiError } from './api-error.ts';
import { serveGeneration } from './generation.ts';
import { openAiGenerationWire, parseGeneration } from './openai-wire.ts';
import type { GenerationKind } from './openai-wire.ts';
import { sendBadRequest } from './respond.ts';
import type { Route } from './route.ts';

function generationRoute(sim: Simulator, path: string, kind: GenerationKind): Route {
  const single = openAiGenerationWire(kind);
  return {
    kind: 'json',
    path,
    inference: true,
    handle: (ex, body) => {
      const request = parseGeneration(kind, body);
      if (isApiError(request)) return sendBadRequest(sim, ex.res, request);
      const wire = request.n === 1 ? single : openAiGenerationWire(kind, request.n);
      serveGeneration(sim, ex, request, wire);
    },
  };
}

export function completionsRoutes(sim: Simulator): Route[] {
  return [
    generationRoute(sim, '/v1/chat/completions', 'chat'),
    generationRoute(sim, '/v1/completions', 'completion'),
  ];
}
