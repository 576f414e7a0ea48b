/**
 * The reconcile decision: what snapshot a pool's sidecars should run on, and how the pool stands
 * (conditions, endpoint counts, events). Pure: the shell reads its informer caches, calls
 * `desiredSnapshot`, pushes the snapshot when `hash` changed, and writes status (`status.ts`).
 *
 * Level-triggered: the result depends only on the objects passed in (and, for `events` only, on
 * the previous result), never on which event caused the reconcile.
 */
import {
  API_VERSION,
  KIND,
  type InferencePool,
  type InferencePoolSpec,
} from '../../crds/inference-pool.schema.ts';
import { joinPath } from '../../crds/path.ts';
import { withDriftVerdict } from '../../crds/drift.ts';
import type { DriftPolicy, EndpointSpec } from '../../crds/policy-types.ts';
import {
  apiKeyFields,
  modelFields,
  resolvePolicy,
  tlsFields,
  urlEndpoints,
} from '../../crds/resolve.ts';
import { validatePool } from '../../crds/validate.ts';
import { readApiKey } from './api-key.ts';
import { readCaBundle } from './ca-bundle.ts';
import { reconcileEvents } from './events.ts';
import { compareStrings, contentHash } from './hash.ts';
import type { EndpointSlice, Secret, Service } from './objects.ts';
import { Reason, clipUtf8, joinLimited, plural, type Problem } from './problems.ts';
import type { BackendSummary, ReconcileCondition, ReconcileResult } from './reconcile-result.ts';
import { type PoolModels, poolModels } from './pool-models.ts';
import { serviceEndpoints, type ServiceEndpointsResult } from './service-endpoints.ts';
import { gaieEndpoints, type GaieLookup } from './gaie-endpoints.ts';

export interface ReconcileInput {
  /** The pool as the API serves it (defaulted); validated again here, defensively. */
  pool: InferencePool;
  /** Services of the pool's namespace, by name. */
  services: ReadonlyMap<string, Service>;
  /** EndpointSlices of the pool's namespace, by their `kubernetes.io/service-name` label. */
  slicesByService: ReadonlyMap<string, readonly EndpointSlice[]>;
  /** Secrets of the pool's namespace, by name. */
  secrets: ReadonlyMap<string, Secret>;
  /**
   * The GAIE InferencePools the pool's `inferencePoolRef` backends name, by name, each with the
   * pods its selector matches (a name left out: not found).
   */
  gaiePools?: ReadonlyMap<string, GaieLookup> | undefined;
  /** The result of the previous reconcile of this pool, for `events`. */
  previous?: ReconcileResult | undefined;
}

/** Spec errors listed in the Accepted message; the rest are counted. */
export const MAX_LISTED_SPEC_ERRORS = 10;
/** The API server's limit on a condition message. */
export const CONDITION_MESSAGE_MAX_BYTES = 32768;

const NOT_SENT = 'no snapshot is sent and the sidecars keep their last one';

interface BackendOutcome extends BackendSummary {
  endpoints: EndpointSpec[];
}

/**
 * The desired snapshot of a pool, its conditions and its events.
 *
 * The spec is validated again with `validatePool`, the pool-file validator, though the API server
 * already enforced the CRD schema and its CEL rules: it fills defaults a stored object may lack
 * (an object written before a default existed), and it applies the checks CEL cannot express (URL
 * parsing), so a resource and a pool file mean exactly the same. A spec it rejects is
 * Accepted=False with its messages, and no snapshot is sent.
 */
export function desiredSnapshot(input: ReconcileInput): ReconcileResult {
  const { pool } = input;
  const namespace = pool.metadata.namespace ?? '';
  const name = pool.metadata.name;
  const validation = validatePool({
    apiVersion: API_VERSION,
    kind: KIND,
    metadata: { name, ...(namespace === '' ? {} : { namespace }) },
    spec: pool.spec,
  });
  if (!validation.ok) {
    const problems = validation.errors.map((e) => ({
      reason: Reason.InvalidSpec,
      message: `${e.path}: ${e.message}`,
    }));
    return finish(input, {
      snapshot: undefined,
      hash: '',
      conditions: [
        acceptedCondition(problems),
        {
          type: 'ResolvedRefs',
          status: 'Unknown',
          reason: Reason.NotAccepted,
          message: 'The spec was not accepted, so its references were not resolved',
        },
        notAcceptedReady(),
      ],
      endpoints: { ready: 0, total: 0, drifted: 0 },
      backends: [],
    });
  }

  const spec = validation.pool.spec;
  const specProblems: Problem[] = [];
  const resolved = resolvePolicy(spec);
  // Not reachable while validatePool checks every duration; kept so that a validator change can
  // never turn into a snapshot with a NaN in its policy.
  if (!resolved.ok) {
    specProblems.push(
      ...resolved.errors.map((e) => ({
        reason: Reason.InvalidSpec,
        message: `${e.path}: ${e.message}`,
      })),
    );
  }

  const outcomes = spec.backends.map((backend, tier): BackendOutcome => {
    const path = joinPath('spec.backends', tier);
    if (backend.apiKeyEnv !== undefined) {
      // EndpointSpec has no place for it and the sidecars' environment is not ours to read;
      // dropping it would send requests without their key.
      specProblems.push({
        reason: Reason.UnsupportedField,
        message: `${joinPath(path, 'apiKeyEnv')}: is read from the sidecar's environment and works only in a pool file; in Kubernetes use apiKeySecretRef`,
      });
    }
    const problems: Problem[] = [];
    const prefix = `Backend ${backend.name}: `;
    let apiKey: string | undefined;
    if (backend.apiKeySecretRef !== undefined) {
      const key = readApiKey(input.secrets, backend.apiKeySecretRef);
      if (key.ok) apiKey = key.apiKey;
      else problems.push({ ...key.problem, message: prefix + key.problem.message });
    }
    let caBundle = backend.tls?.caBundle;
    const caRef = backend.tls?.caSecretRef;
    if (caRef !== undefined) {
      const ca = readCaBundle(input.secrets, caRef);
      if (ca.ok) caBundle = ca.caBundle;
      else
        problems.push({
          ...ca.problem,
          message: `${prefix}tls.caSecretRef: ${ca.problem.message}`,
        });
    }

    let endpoints: EndpointSpec[] = [];
    let total = 0;
    const found = clusterEndpoints(backend, tier, namespace, input);
    if (found !== undefined) {
      if (found.ok) {
        endpoints = found.endpoints.map((e) => ({ ...e, ...modelFields(backend) }));
        total = found.total;
      } else {
        problems.unshift({ ...found.problem, message: prefix + found.problem.message });
      }
    } else {
      const found = urlEndpoints(backend, tier, apiKey);
      if (found.ok) {
        endpoints = [...found.endpoints].sort((a, b) => compareStrings(a.id, b.id));
        total = endpoints.length;
      } else {
        specProblems.push(
          ...found.errors.map((e) => ({
            reason: Reason.InvalidSpec,
            message: `${e.path}: ${e.message}`,
          })),
        );
      }
    }
    if (problems.length > 0) endpoints = [];
    else if (apiKey !== undefined || backend.tls !== undefined)
      endpoints = endpoints.map((e) => ({
        ...e,
        ...apiKeyFields(backend, apiKey),
        ...tlsFields(backend.tls, caBundle),
      }));
    return { name: backend.name, tier, ready: endpoints.length, total, problems, endpoints };
  });

  const backends: BackendSummary[] = outcomes.map(
    ({ endpoints: _endpoints, problems, ...rest }) => ({ ...rest, problems: [...problems] }),
  );
  const endpoints = markDrift(
    outcomes.flatMap((o) => o.endpoints),
    resolved.ok ? resolved.policy.drift : undefined,
    pool.status?.drift?.endpoints,
  );
  const excluded = endpoints.filter((e) => e.drifted === true).length;
  const counts = {
    ready: endpoints.length - excluded,
    total: outcomes.reduce((sum, o) => sum + o.total, 0),
    drifted:
      resolved.ok && resolved.policy.drift !== undefined
        ? countDrifted(endpoints, pool.status?.drift?.endpoints)
        : 0,
  };
  const refProblems = outcomes.flatMap((o) => o.problems);
  const resolvedRefs = resolvedRefsCondition(refProblems, outcomes.length);

  if (specProblems.length > 0 || !resolved.ok) {
    return finish(input, {
      snapshot: undefined,
      hash: '',
      conditions: [acceptedCondition(specProblems), resolvedRefs, notAcceptedReady()],
      endpoints: counts,
      backends,
    });
  }

  const accepted = acceptedCondition([]);
  if (outcomes.every((o) => o.problems.length > 0)) {
    return finish(input, {
      snapshot: undefined,
      hash: '',
      conditions: [
        accepted,
        resolvedRefs,
        {
          type: 'Ready',
          status: 'False',
          reason: Reason.BackendsNotResolved,
          message: `No backend resolved (see ResolvedRefs): ${NOT_SENT}`,
        },
      ],
      endpoints: counts,
      backends,
      ...modelsOf(poolModels(spec, endpoints)),
    });
  }

  const { policy, timeouts } = resolved;
  const hash = contentHash({ policy, timeouts, endpoints });
  return finish(input, {
    snapshot: { hash, pool: { namespace, name }, policy, timeouts, endpoints },
    hash,
    conditions: [accepted, resolvedRefs, readyCondition(outcomes, counts)],
    endpoints: counts,
    backends,
    ...modelsOf(poolModels(spec, endpoints)),
  });
}

/**
 * The endpoints of a backend whose pods the cluster tells: a `service` (its EndpointSlices) or an
 * `inferencePoolRef` (a GAIE pool's pods); undefined for a `url` or `urls` backend.
 */
function clusterEndpoints(
  backend: InferencePoolSpec['backends'][number],
  tier: number,
  namespace: string,
  input: ReconcileInput,
): ServiceEndpointsResult | undefined {
  if (backend.service !== undefined)
    return serviceEndpoints(
      { ...backend, tier, service: backend.service },
      input.services,
      input.slicesByService,
    );
  if (backend.inferencePoolRef !== undefined)
    return gaieEndpoints(
      { ...backend, tier, inferencePoolRef: backend.inferencePoolRef },
      namespace,
      input.gaiePools?.get(backend.inferencePoolRef.name),
    );
  return undefined;
}

/** The result fields of `poolModels`, each left out when there is nothing to say. */
function modelsOf({
  models,
  aliasesNotServed,
}: PoolModels): Pick<ReconcileResult, 'models' | 'aliasesNotServed'> {
  return {
    ...(models === undefined ? {} : { models }),
    ...(aliasesNotServed.length === 0 ? {} : { aliasesNotServed }),
  };
}

type DriftRecord = NonNullable<NonNullable<InferencePool['status']>['drift']>['endpoints'][number];

/**
 * Drift verdicts, as the leader recorded them in the pool's status (drift.endpoints), applied to
 * the endpoints: every replica reads the same status, so every replica sends the same snapshot.
 * An endpoint gets the fingerprint of its last good probe (the sidecars' passive check compares
 * responses with it) and, when drift.action is Exclude and it drifted, `drifted: true`. Without
 * drift detection in the spec, a stale status says nothing.
 */
function markDrift(
  endpoints: EndpointSpec[],
  drift: DriftPolicy | undefined,
  records: readonly DriftRecord[] | undefined,
): EndpointSpec[] {
  if (drift === undefined || records === undefined || records.length === 0) return endpoints;
  const byId = new Map(records.map((r) => [r.id, r]));
  return endpoints.map((e) => {
    const record = byId.get(e.id);
    return record === undefined ? e : withDriftVerdict(e, record, drift.action);
  });
}

function countDrifted(
  endpoints: readonly EndpointSpec[],
  records: readonly DriftRecord[] | undefined,
): number {
  const drifted = new Set((records ?? []).filter((r) => r.drifted).map((r) => r.id));
  return endpoints.filter((e) => drifted.has(e.id)).length;
}

function finish(input: ReconcileInput, result: Omit<ReconcileResult, 'events'>): ReconcileResult {
  const conditions = result.conditions.map((c) => ({
    ...c,
    message: clipUtf8(c.message, CONDITION_MESSAGE_MAX_BYTES),
  }));
  const full = { ...result, conditions, events: [] };
  return { ...full, events: reconcileEvents(input.previous, full) };
}

function acceptedCondition(problems: readonly Problem[]): ReconcileCondition {
  const first = problems[0];
  if (first === undefined) {
    return { type: 'Accepted', status: 'True', reason: Reason.Accepted, message: 'Spec accepted' };
  }
  return {
    type: 'Accepted',
    status: 'False',
    reason: first.reason,
    message: joinLimited(
      problems.map((p) => p.message),
      MAX_LISTED_SPEC_ERRORS,
    ),
  };
}

function notAcceptedReady(): ReconcileCondition {
  return {
    type: 'Ready',
    status: 'False',
    reason: Reason.NotAccepted,
    message: `The spec was not accepted (see Accepted): ${NOT_SENT}`,
  };
}

function resolvedRefsCondition(problems: readonly Problem[], backends: number): ReconcileCondition {
  const first = problems[0];
  if (first === undefined) {
    return {
      type: 'ResolvedRefs',
      status: 'True',
      reason: Reason.BackendsResolved,
      message: backends === 1 ? 'The backend resolved' : `All ${backends} backends resolved`,
    };
  }
  return {
    type: 'ResolvedRefs',
    status: 'False',
    reason: first.reason,
    message: problems.map((p) => p.message).join('; '),
  };
}

function readyCondition(
  outcomes: readonly BackendOutcome[],
  counts: { ready: number; total: number },
): ReconcileCondition {
  if (counts.ready > 0) {
    return {
      type: 'Ready',
      status: 'True',
      reason: Reason.EndpointsReady,
      message: `${counts.ready} of ${plural(counts.total, 'endpoint')} ready`,
    };
  }
  const why = outcomes.map((o) => {
    if (o.problems.length > 0) return `backend ${o.name} is not resolved`;
    if (o.total === 0) return `backend ${o.name} has no endpoints`;
    return `backend ${o.name} has 0 of ${o.total} ready`;
  });
  return {
    type: 'Ready',
    status: 'False',
    reason: Reason.NoReadyEndpoints,
    message: `No endpoint is ready: ${why.join('; ')}`,
  };
}
