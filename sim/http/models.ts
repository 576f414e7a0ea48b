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

/** The base model LoRA adapters are listed under (their `parent`). */
export function baseModel(o: SimOptions): string {
  return listedModel(o);
}

/**
 * The model a request is served as, or a 404 when the simulator is restricted to another one: the
 * configured model, or one of its LoRA adapters (any name, when no model is configured).
 */
export function resolveModel(sim: Simulator, requested: string | undefined): string | ApiError {
  const only = sim.options().model;
  if (
    only !== undefined &&
    requested !== undefined &&
    requested !== only &&
    !sim.adapters().has(requested)
  ) {
    return modelNotFound(requested, only);
  }
  return requested ?? listedModel(sim.options());
}

/** The LoRA adapter a (resolved) model name is, or undefined for the base model. */
export function adapterOf(sim: Simulator, model: string): string | undefined {
  return sim.adapters().has(model) ? model : undefined;
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
function modelObject(
  id: string,
  o: SimOptions,
  adapter?: { root: string; parent: string },
): Record<string, unknown> {
  const created = Math.floor(Date.now() / 1000);
  return {
    id,
    object: 'model',
    created,
    owned_by: 'vllm',
    root: adapter?.root ?? id,
    // vLLM lists a LoRA adapter with its base model as parent; the base model's is null.
    parent: adapter?.parent ?? null,
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
          data: listedModels(sim),
        }),
    },
    {
      kind: 'read',
      path: '/v1/models/',
      prefix: true,
      handle: ({ res, path }) => {
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        const only = sim.options().model;
        const adapter = listedModels(sim).find((m) => m['id'] === id && m['parent'] !== null);
        if (adapter !== undefined) return sendJson(res, 200, adapter);
        if (only === undefined || id === only) {
          return sendJson(res, 200, modelObject(id, sim.options()));
        }
        sendError(res, modelNotFound(id, only));
      },
    },
  ];
}

/** The base model, then each LoRA adapter with its base as `parent`, as vLLM lists them. */
function listedModels(sim: Simulator): Record<string, unknown>[] {
  const o = sim.options();
  const base = listedModel(o);
  return [
    modelObject(base, o),
    ...[...sim.adapters()].map(([name, root]) => modelObject(name, o, { root, parent: base })),
  ];
}
