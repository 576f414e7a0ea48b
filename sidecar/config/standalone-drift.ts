/**
 * Drift detection of a standalone sidecar (a pool file with `drift.probeEvery`): the same probes
 * and the same judgement the controller runs in Kubernetes (docs/drift.md), over the pool file's
 * endpoints, applied to this sidecar's balancer. In Kubernetes the controller probes and the
 * snapshot carries the verdicts; then this is off.
 */
import type { Logger } from 'pino';
import { judgeDrift, withDriftVerdict } from '../../crds/drift.ts';
import type { DriftPolicy, EndpointSpec } from '../../crds/policy-types.ts';
import { DriftProber, type ProbeResult, type ProbeTarget } from '../../probe/drift-prober.ts';

export interface StandaloneDriftOptions {
  logger: Logger;
  /** The verdicts changed: re-apply the endpoints through `mark`. */
  onChange: () => void;
}

export class StandaloneDrift {
  readonly #options: StandaloneDriftOptions;
  #policy: DriftPolicy | undefined;
  #prober: DriftProber | undefined;
  readonly #fingerprints = new Map<string, string | undefined>();
  #drifted: ReadonlySet<string> = new Set();

  constructor(options: StandaloneDriftOptions) {
    this.#options = options;
  }

  /** The pool file's drift policy and endpoints (after every applied change). */
  configure(policy: DriftPolicy | undefined, endpoints: readonly EndpointSpec[]): void {
    if (
      policy === undefined ||
      this.#policy?.probeEveryMs !== policy.probeEveryMs ||
      this.#policy.prompt !== policy.prompt
    ) {
      this.#prober?.stop();
      this.#prober = undefined;
    }
    this.#policy = policy;
    if (policy === undefined) {
      this.#fingerprints.clear();
      this.#drifted = new Set();
      return;
    }
    const ids = new Set(endpoints.map((e) => e.id));
    for (const id of this.#fingerprints.keys()) if (!ids.has(id)) this.#fingerprints.delete(id);
    this.#prober ??= new DriftProber({
      everyMs: policy.probeEveryMs,
      prompt: policy.prompt,
      onResult: (target, result) => this.#record(target, result),
    });
    this.#prober.setTargets(
      endpoints.map((e) => ({ id: e.id, url: e.url, apiKey: e.apiKey, model: e.model })),
    );
    // No onChange: the caller is applying these endpoints and marks them itself.
    this.#judge();
  }

  /** The endpoints with the verdicts applied: the probe's fingerprint, and drifted (Exclude). */
  mark(endpoints: readonly EndpointSpec[]): EndpointSpec[] {
    const policy = this.#policy;
    if (policy === undefined) return [...endpoints];
    return endpoints.map((e) =>
      withDriftVerdict(
        e,
        { fingerprint: this.#fingerprints.get(e.id), drifted: this.#drifted.has(e.id) },
        policy.action,
      ),
    );
  }

  stop(): void {
    this.#prober?.stop();
    this.#prober = undefined;
  }

  #record(target: ProbeTarget, result: ProbeResult): void {
    if (!result.ok) {
      // Not drift: the last good fingerprint stands.
      this.#options.logger.debug({ endpoint: target.id, err: result.error }, 'drift probe failed');
      if (!this.#fingerprints.has(target.id)) this.#fingerprints.set(target.id, undefined);
      return;
    }
    const before = this.#fingerprints.get(target.id);
    this.#fingerprints.set(target.id, result.fingerprint);
    if (before === result.fingerprint) return;
    this.#judge();
    // A new fingerprint matters even without a new verdict (the passive check compares with it).
    this.#options.onChange();
  }

  #judge(): void {
    if (this.#policy === undefined) return;
    const judgement = judgeDrift(this.#fingerprints, this.#policy.expect);
    for (const id of judgement.drifted)
      if (!this.#drifted.has(id))
        this.#options.logger.warn(
          {
            endpoint: id,
            fingerprint: this.#fingerprints.get(id),
            expected: judgement.expected,
            action: this.#policy.action,
          },
          'endpoint drifted',
        );
    for (const id of this.#drifted)
      if (!judgement.drifted.has(id))
        this.#options.logger.info(
          { endpoint: id },
          'endpoint answers the expected fingerprint again',
        );
    this.#drifted = judgement.drifted;
  }
}
