/**
 * Drift detection, decided (docs/drift.md): what an endpoint's probe answer says it serves (its
 * fingerprint), and which endpoints differ from what the pool expects. Shared by the controller
 * (which probes in Kubernetes) and the standalone sidecar (which probes itself). Pure: the probes
 * themselves are in probe/.
 */
import type { EndpointSpec } from './policy-types.ts';

/** What one probe saw: the model the endpoint reports, its system_fingerprint, and its answer. */
export interface ProbeObservation {
  /** `model` of the completion (or the first id of GET /models when the completion had none). */
  modelId: string | undefined;
  /** `system_fingerprint` of the completion, when the server sends one. */
  systemFingerprint: string | undefined;
  /** SHA-256 (hex) of the deterministic completion's text. */
  outputHash: string;
}

/** `expect` of a pool that compares endpoints with each other rather than with a given value. */
export const MAJORITY = 'Majority';

/**
 * The fingerprint of an observation: `model/system_fingerprint/hash`, readable in status
 * (`llama-3.1-8b/fp_44709d6fcb/3f2a9c10e4b7`), `-` for a missing part, the hash cut to 12 hex
 * digits (48 bits: two different answers colliding is not a worry at this scale).
 */
export function fingerprintOf(o: ProbeObservation): string {
  return `${fingerprintPart(o.modelId)}/${fingerprintPart(o.systemFingerprint)}/${o.outputHash.slice(0, 12)}`;
}

function fingerprintPart(s: string | undefined): string {
  return s === undefined || s === '' ? '-' : s.replaceAll('/', '_').slice(0, 120);
}

/** The model and system_fingerprint a fingerprint records (as written: `/` became `_`). */
export function parseFingerprint(fingerprint: string): {
  fingerprint: string;
  model?: string;
  systemFingerprint?: string;
} {
  const [model, systemFingerprint] = fingerprint.split('/');
  return {
    fingerprint,
    ...(model === undefined || model === '-' || model === '' ? {} : { model }),
    ...(systemFingerprint === undefined || systemFingerprint === '-' || systemFingerprint === ''
      ? {}
      : { systemFingerprint }),
  };
}

export interface DriftJudgement {
  /** The fingerprint endpoints are compared with; undefined when the majority is undecided. */
  expected: string | undefined;
  /** Endpoints whose known fingerprint differs from `expected`. */
  drifted: ReadonlySet<string>;
}

/**
 * Which endpoints drifted. `fingerprints` maps every endpoint to its last known fingerprint, or
 * undefined when no probe of it has succeeded yet: a probe failure is not drift, so such an
 * endpoint is never drifted (and keeps the verdict of its last good probe, which is what its last
 * known fingerprint says).
 *
 * - `expect` = `Majority`: the expected fingerprint is the one held by more than half of the
 *   endpoints with a fingerprint. Without such a majority (a 1–1 split, three different answers)
 *   nothing is judged drifted: there is no telling which side is right.
 * - any other `expect`: that exact fingerprint.
 */
export function judgeDrift(
  fingerprints: ReadonlyMap<string, string | undefined>,
  expect: string,
): DriftJudgement {
  const known = [...fingerprints].filter((e): e is [string, string] => e[1] !== undefined);
  let expected: string | undefined;
  if (expect !== MAJORITY) expected = expect;
  else {
    const counts = new Map<string, number>();
    for (const [, fp] of known) counts.set(fp, (counts.get(fp) ?? 0) + 1);
    for (const [fp, n] of counts) if (n * 2 > known.length) expected = fp;
  }
  const drifted = new Set<string>();
  if (expected !== undefined) for (const [id, fp] of known) if (fp !== expected) drifted.add(id);
  return { expected, drifted };
}

/**
 * Whether a response's `model` and `system_fingerprint` contradict what the endpoint's probe saw
 * (the sidecar's passive check). A field the response or the probe does not have says nothing.
 */
export function responseMismatches(
  probe: { model?: string | undefined; systemFingerprint?: string | undefined },
  response: { model?: string | undefined; systemFingerprint?: string | undefined },
): boolean {
  // Compared as the fingerprint writes them (a probe may be known only from its fingerprint).
  const differs = (a: string | undefined, b: string | undefined): boolean =>
    a !== undefined &&
    a !== '' &&
    b !== undefined &&
    b !== '' &&
    fingerprintPart(a) !== fingerprintPart(b);
  return (
    differs(probe.model, response.model) ||
    differs(probe.systemFingerprint, response.systemFingerprint)
  );
}

/**
 * An endpoint with its drift verdict applied, the same way wherever the verdict comes from (the
 * pool's status in the controller, the sidecar's own probes standalone): the fingerprint of its
 * last good probe, for the passive check and /debug/backends, and `drifted: true` (no traffic)
 * when it drifted and the action is Exclude. With Warn a drifted endpoint keeps its traffic and
 * only its probe says so.
 */
export function withDriftVerdict(
  endpoint: EndpointSpec,
  verdict: { fingerprint?: string | undefined; drifted: boolean },
  action: 'Exclude' | 'Warn',
): EndpointSpec {
  const marked: EndpointSpec = { ...endpoint };
  if (verdict.fingerprint !== undefined)
    marked.probe = {
      ...parseFingerprint(verdict.fingerprint),
      ...(verdict.drifted ? { drifted: true } : {}),
    };
  if (verdict.drifted && action === 'Exclude') marked.drifted = true;
  return marked;
}
