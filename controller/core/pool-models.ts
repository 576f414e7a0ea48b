/**
 * Which models a pool serves, as its backends declare them (`spec.backends[].models`), and which
 * of its aliases point at a model no ready endpoint declares: `status.models` and the
 * AliasTargetNotServed event. Pure.
 *
 * Only declared lists count. An endpoint whose backend declares none is asked for its list by
 * every sidecar (`GET /v1/models`); the controller never asks, so it cannot say what such an
 * endpoint serves. Hence an alias is called not served only when EVERY backend declares its
 * models: with one undeclared backend, that backend might serve the alias's model.
 */
import type { InferencePoolSpec } from '../../crds/inference-pool.schema.ts';
import { STATUS_MODELS_LIMIT } from '../../crds/inference-pool.schema.ts';
import type { EndpointSpec } from '../../crds/policy-types.ts';
import { compareStrings } from './hash.ts';

/** One entry of `status.models`. */
export interface ModelSummary {
  name: string;
  /** Ready endpoints that declare it (for an alias: that declare its model). */
  endpoints: number;
  /** For an alias: the served model it stands for. */
  aliasOf?: string;
}

export interface PoolModels {
  /**
   * Declared models by name, then aliases by name, at most STATUS_MODELS_LIMIT; undefined when no
   * backend declares models (status.models is then left out).
   */
  models: ModelSummary[] | undefined;
  /** Aliases whose model no ready endpoint declares, when every backend declares its models. */
  aliasesNotServed: { name: string; model: string }[];
}

/**
 * The models of `spec` and their ready endpoints. `endpoints` are those of the snapshot: ready
 * ones, with `drifted: true` on those drift detection excludes (not counted, they get no traffic).
 */
export function poolModels(
  spec: Pick<InferencePoolSpec, 'backends' | 'aliases'>,
  endpoints: readonly EndpointSpec[],
): PoolModels {
  const declared = new Map<string, number>();
  for (const backend of spec.backends)
    for (const model of backend.models ?? []) declared.set(model, 0);
  if (declared.size === 0) return { models: undefined, aliasesNotServed: [] };

  for (const e of endpoints) {
    if (e.drifted === true) continue;
    for (const model of e.models ?? []) declared.set(model, (declared.get(model) ?? 0) + 1);
  }
  const aliases = [...(spec.aliases ?? [])].sort((a, b) => compareStrings(a.name, b.name));
  const models: ModelSummary[] = [
    ...[...declared]
      .sort(([a], [b]) => compareStrings(a, b))
      .map(([name, count]) => ({ name, endpoints: count })),
    ...aliases.map((a) => ({
      name: a.name,
      endpoints: declared.get(a.model) ?? 0,
      aliasOf: a.model,
    })),
  ].slice(0, STATUS_MODELS_LIMIT);

  const everyBackendDeclares = spec.backends.every((b) => b.models !== undefined);
  const aliasesNotServed = everyBackendDeclares
    ? aliases
        .filter((a) => (declared.get(a.model) ?? 0) === 0)
        .map(({ name, model }) => ({ name, model }))
    : [];
  return { models, aliasesNotServed };
}
