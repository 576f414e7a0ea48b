/**
 * The served model: which names the simulator answers to, and `GET /v1/models[/<id>]`.
 */
import { randomBytes } from 'node:crypto';
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

/** The context length reported (`/v1/models`, `/tokenize`) when `maxModelLen` is unset. */
const UNLIMITED_MODEL_LEN = 131_072;

/** The context length vLLM would report: `maxModelLen`, or a large one when there is no limit. */
export function reportedMaxModelLen(o: SimOptions): number {
  return o.maxModelLen ?? UNLIMITED_MODEL_LEN;
}

/**
 * A model as vLLM lists it: `created` the current time, `owned_by: "vllm"`, `root` the model's
 * path (here its name: the simulator loads no files), and a permission entry of fixed flags.
 */
function modelObject(id: string, o: SimOptions): Record<string, unknown> {
  const created = Math.floor(Date.now() / 1000);
  return {
    id,
    object: 'model',
    created,
    owned_by: 'vllm',
    root: id,
    parent: null,
    max_model_len: reportedMaxModelLen(o),
    permission: [
      {
        id: `modelperm-${randomBytes(8).toString('hex')}`,
        object: 'model_permission',
        created,
        allow_create_engine: false,
        allow_sampling: true,
        allow_logprobs: true,
        allow_search_indices: false,
        allow_view: true,
        allow_fine_tuning: false,
        organization: '*',
        group: null,
        is_blocking: false,
      },
    ],
  };
}

export function modelsRoutes(sim: Simulator): Route[] {
  return [
    {
      kind: 'read',
      path: '/v1/models',
      handle: ({ res }) =>
        sendJson(res, 200, {
          object: 'list',
          data: [modelObject(listedModel(sim.options()), sim.options())],
        }),
    },
    {
      kind: 'read',
      path: '/v1/models/',
      prefix: true,
      handle: ({ res, path }) => {
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        const only = sim.options().model;
        if (only === undefined || id === only) {
          return sendJson(res, 200, modelObject(id, sim.options()));
        }
        sendError(res, modelNotFound(id, only));
      },
    },
  ];
}
