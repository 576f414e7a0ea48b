/**
 * The served model: which names the simulator answers to, and `GET /v1/models[/<id>]`.
 */
import type { SimOptions } from '../options.ts';
import type { Simulator } from '../simulator.ts';
import { modelNotFound } from './api-error.ts';
import type { ApiError } from './api-error.ts';
import { sendError, sendJson } from './respond.ts';
import type { Route } from './route.ts';

/** Model name listed by GET /v1/models (and used when a request names none) if `model` is unset. */
export const ANY_MODEL_NAME = 'sim-model';

function listedModel(o: SimOptions): string {
  return o.model ?? ANY_MODEL_NAME;
}

/** The model a request is served as, or a 404 when the simulator is restricted to another one. */
export function resolveModel(o: SimOptions, requested: string | undefined): string | ApiError {
  const only = o.model;
  if (only !== undefined && requested !== undefined && requested !== only) {
    return modelNotFound(requested, only);
  }
  return requested ?? listedModel(o);
}

function modelObject(id: string): Record<string, unknown> {
  return { id, object: 'model', created: 0, owned_by: 'switchyard-sim' };
}

export function modelsRoutes(sim: Simulator): Route[] {
  return [
    {
      kind: 'read',
      path: '/v1/models',
      handle: ({ res }) =>
        sendJson(res, 200, { object: 'list', data: [modelObject(listedModel(sim.options()))] }),
    },
    {
      kind: 'read',
      path: '/v1/models/',
      prefix: true,
      handle: ({ res, path }) => {
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        const only = sim.options().model;
        if (only === undefined || id === only) return sendJson(res, 200, modelObject(id));
        sendError(res, modelNotFound(id, only));
      },
    },
  ];
}
