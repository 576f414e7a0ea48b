/**
 * `endpoints` deltas (issue 46): the change of a pool's endpoint list between two snapshots, and
 * its application. Pure, and shared: the controller computes a delta once per pool per change
 * (`endpointsDelta`), the sidecar rebuilds the new snapshot from the one it holds
 * (`applyEndpointsDelta`). docs/snapshot-protocol.md has the rules.
 *
 * The order of the new list is carried, not re-derived: the survivors keep their order and each
 * added endpoint says at which index it lands, so the sidecar builds exactly the list the full
 * snapshot would hold whatever order the controller chose. A change that reorders survivors, or
 * touches the policy or timeouts, is no delta: the controller sends the full snapshot.
 */
import { canonicalJson, contentHash } from './content-hash.ts';
import type { EndpointsDelta, PoolSnapshot } from './snapshot.ts';

/**
 * The delta from `base` to `next`; undefined when it cannot be one (policy, timeouts or pool
 * changed, or survivors were reordered): then only the full snapshot says it.
 */
export function endpointsDelta(base: PoolSnapshot, next: PoolSnapshot): EndpointsDelta | undefined {
  if (
    canonicalJson(base.pool) !== canonicalJson(next.pool) ||
    canonicalJson(base.policy) !== canonicalJson(next.policy) ||
    canonicalJson(base.timeouts) !== canonicalJson(next.timeouts)
  )
    return undefined;
  const before = new Map(base.endpoints.map((e) => [e.id, e]));
  const nextIds = new Set(next.endpoints.map((e) => e.id));
  const removed = base.endpoints.filter((e) => !nextIds.has(e.id)).map((e) => e.id);
  const survivorsBefore = base.endpoints.filter((e) => nextIds.has(e.id)).map((e) => e.id);
  const added: EndpointsDelta['added'] = [];
  const changed: EndpointsDelta['changed'] = [];
  let survivor = 0;
  for (const [at, endpoint] of next.endpoints.entries()) {
    const old = before.get(endpoint.id);
    if (old === undefined) {
      added.push({ at, endpoint });
      continue;
    }
    if (survivorsBefore[survivor++] !== endpoint.id) return undefined; // reordered
    if (canonicalJson(old) !== canonicalJson(endpoint)) changed.push(endpoint);
  }
  return {
    version: next.version,
    baseVersion: base.version,
    hash: next.hash,
    endpointsHash: contentHash(next.endpoints),
    added,
    removed,
    changed,
  };
}

export type DeltaResult = { ok: true; snapshot: PoolSnapshot } | { ok: false; reason: string };

/**
 * The snapshot `delta` makes of `base`, or why it does not apply (another base, an id it does not
 * know, or a list whose hash is not `endpointsHash`): then the holder of `base` needs the full
 * snapshot.
 */
export function applyEndpointsDelta(base: PoolSnapshot, delta: EndpointsDelta): DeltaResult {
  if (delta.baseVersion !== base.version)
    return {
      ok: false,
      reason: `the delta is from version ${delta.baseVersion}, this sidecar holds ${base.version}`,
    };
  const ids = new Set(base.endpoints.map((e) => e.id));
  for (const id of delta.removed)
    if (!ids.delete(id)) return { ok: false, reason: `removed endpoint ${id} is not held` };
  const changed = new Map(delta.changed.map((e) => [e.id, e]));
  for (const id of changed.keys())
    if (!ids.has(id)) return { ok: false, reason: `changed endpoint ${id} is not held` };
  const gone = new Set(delta.removed);
  const endpoints = base.endpoints
    .filter((e) => !gone.has(e.id))
    .map((e) => changed.get(e.id) ?? e);
  for (const { at, endpoint } of delta.added) {
    if (ids.has(endpoint.id))
      return { ok: false, reason: `added endpoint ${endpoint.id} is held already` };
    if (at > endpoints.length)
      return { ok: false, reason: `added endpoint ${endpoint.id} at ${at}, past the list's end` };
    ids.add(endpoint.id);
    endpoints.splice(at, 0, endpoint);
  }
  if (contentHash(endpoints) !== delta.endpointsHash)
    return { ok: false, reason: 'the endpoint list built differs from the controller’s (hash)' };
  return { ok: true, snapshot: { ...base, version: delta.version, hash: delta.hash, endpoints } };
}
