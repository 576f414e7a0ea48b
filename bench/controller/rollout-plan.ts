/**
 * A Deployment rolling restart as the EndpointSlice controller writes it, planned without I/O
 * (fleet-rolling.ts replays the plan against the API server).
 *
 * The Deployment defaults, maxSurge 25 % (rounded up) and maxUnavailable 25 % (rounded down):
 * the rollout goes in waves of `wave = ceil(n / 4)` pods. The first wave's new pods are created
 * (an IP, not ready) while as many old pods start terminating; then for every wave k, its new pods
 * turn ready, its old pods are removed (grace period over), and wave k + 1 starts: new pods
 * created, old pods terminating. Each of those phases is cut into steps of at most `batch` pods,
 * one step per EndpointSlice sync (pods do not turn ready all at the same moment in a real
 * rollout either).
 *
 * Slices hold at most 100 endpoints, as the EndpointSlice controller's default
 * (--max-endpoints-per-slice): an endpoint stays in its slice until its pod is gone, a new one
 * goes into the first slice with room or else into a new slice, and a slice left empty is deleted.
 */

export const MAX_PER_SLICE = 100;

export interface Pod {
  ip: string;
  ready: boolean;
  terminating: boolean;
}

export interface Slice {
  name: string;
  pods: Pod[];
}

export type SliceWrite = { op: 'create' | 'update'; slice: Slice } | { op: 'delete'; slice: Slice };

type Change =
  | { kind: 'create'; ip: string }
  | { kind: 'ready'; ip: string }
  | { kind: 'terminate'; ip: string }
  | { kind: 'remove'; ip: string };

/** The Deployment defaults' wave size for `n` replicas. */
export function waveSize(n: number): number {
  return Math.max(1, Math.ceil(n / 4));
}

/** The pod changes of the rollout, step by step (each step at most `batch` pods). */
export function rolloutSteps(
  oldIps: readonly string[],
  newIps: readonly string[],
  batch: number,
): Change[][] {
  const wave = waveSize(oldIps.length);
  const waves = Math.ceil(oldIps.length / wave);
  const of = (ips: readonly string[], k: number): string[] => ips.slice(k * wave, (k + 1) * wave);
  const steps: Change[][] = [];
  const phase = (ips: string[], kind: Change['kind']): void => {
    for (let i = 0; i < ips.length; i += batch)
      steps.push(ips.slice(i, i + batch).map((ip) => ({ kind, ip })));
  };
  phase(of(newIps, 0), 'create');
  phase(of(oldIps, 0), 'terminate');
  for (let k = 0; k < waves; k++) {
    phase(of(newIps, k), 'ready');
    phase(of(oldIps, k), 'remove');
    if (k + 1 < waves) {
      phase(of(newIps, k + 1), 'create');
      phase(of(oldIps, k + 1), 'terminate');
    }
  }
  return steps;
}

/** The slices of `n` ready pods, 100 to a slice, named `<service>-<i>`. */
export function initialSlices(service: string, ips: readonly string[]): Slice[] {
  const slices: Slice[] = [];
  for (let i = 0; i < ips.length; i += MAX_PER_SLICE)
    slices.push({
      name: `${service}-${slices.length + 1}`,
      pods: ips.slice(i, i + MAX_PER_SLICE).map((ip) => ({ ip, ready: true, terminating: false })),
    });
  return slices;
}

/**
 * Applies one step to `slices` (in place) and returns the writes the EndpointSlice controller
 * would make for it: updates and creates first, deletes last, as it orders them.
 */
export function applyStep(service: string, slices: Slice[], step: readonly Change[]): SliceWrite[] {
  const touched = new Set<Slice>();
  const created = new Set<Slice>();
  const find = (ip: string): { slice: Slice; i: number } => {
    for (const slice of slices) {
      const i = slice.pods.findIndex((p) => p.ip === ip);
      if (i !== -1) return { slice, i };
    }
    throw new Error(`rollout plan: no endpoint ${ip}`);
  };
  let next = Math.max(0, ...slices.map((s) => Number(s.name.slice(service.length + 1)))) + 1;
  for (const c of step) {
    if (c.kind === 'create') {
      let slice = slices.find((s) => s.pods.length < MAX_PER_SLICE);
      if (slice === undefined) {
        slice = { name: `${service}-${next++}`, pods: [] };
        slices.push(slice);
        created.add(slice);
      }
      slice.pods.push({ ip: c.ip, ready: false, terminating: false });
      touched.add(slice);
      continue;
    }
    const { slice, i } = find(c.ip);
    touched.add(slice);
    if (c.kind === 'remove') slice.pods.splice(i, 1);
    else if (c.kind === 'ready') slice.pods[i]!.ready = true;
    else slice.pods[i] = { ...slice.pods[i]!, ready: false, terminating: true };
  }
  const writes: SliceWrite[] = [];
  const deletes: SliceWrite[] = [];
  for (const slice of touched) {
    if (slice.pods.length === 0) {
      if (!created.has(slice)) deletes.push({ op: 'delete', slice });
      slices.splice(slices.indexOf(slice), 1);
    } else writes.push({ op: created.has(slice) ? 'create' : 'update', slice });
  }
  return [...writes, ...deletes];
}

/** The ready pods' addresses over all slices. */
export function readyIps(slices: readonly Slice[]): string[] {
  return slices.flatMap((s) => s.pods.filter((p) => p.ready).map((p) => p.ip));
}
