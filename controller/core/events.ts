/**
 * Kubernetes Events for what changed between two reconciles of a pool: a condition that changed
 * its status or reason, an alias whose model came to have no ready endpoint that declares it,
 * and a snapshot whose policy, endpoints or API keys changed. A repeat of the same result says
 * nothing, so a resync emits no events.
 */
import type { EndpointSpec } from '../../crds/policy-types.ts';
import { canonicalJson } from './hash.ts';
import { Reason, clipUtf8, plural } from './problems.ts';
import type { DesiredSnapshot, PoolEvent, ReconcileResult } from './reconcile-result.ts';

/** The limit of an event's note in events.k8s.io/v1; kept for core/v1 messages too. */
export const EVENT_MESSAGE_MAX_BYTES = 1024;
/** Endpoint ids named in an EndpointsChanged message; the rest are counted. */
export const MAX_LISTED_ENDPOINTS = 5;

/**
 * The events between `previous` and `next`. Without a previous result (the first reconcile of
 * this pool since the controller started) only problems are reported: a restart must not announce
 * every healthy pool again, but a broken one should say so.
 */
export function reconcileEvents(
  previous: ReconcileResult | undefined,
  next: Omit<ReconcileResult, 'events'>,
): PoolEvent[] {
  const events: PoolEvent[] = [];
  for (const condition of next.conditions) {
    // Unknown says nothing new, and Ready=False because the spec was not accepted repeats what
    // the Accepted event says.
    if (condition.status === 'Unknown' || condition.reason === Reason.NotAccepted) continue;
    const before = previous?.conditions.find((c) => c.type === condition.type);
    const changed =
      before === undefined
        ? previous === undefined && condition.status === 'False'
        : before.status !== condition.status || before.reason !== condition.reason;
    if (!changed) continue;
    events.push({
      type: condition.status === 'True' ? 'Normal' : 'Warning',
      reason: condition.reason,
      message: condition.message,
    });
  }
  // An alias that newly points at a model no ready endpoint declares (on the first reconcile
  // since a start, every such alias: a broken pool should say so, like a False condition).
  const before = new Set(
    (previous?.aliasesNotServed ?? []).map((a) => `${a.name}\u0000${a.model}`),
  );
  for (const alias of next.aliasesNotServed ?? []) {
    if (before.has(`${alias.name}\u0000${alias.model}`)) continue;
    events.push({
      type: 'Warning',
      reason: Reason.AliasTargetNotServed,
      message:
        `Alias ${alias.name} points at ${alias.model}, which no ready endpoint declares in its ` +
        `backend's models: requests for ${alias.name} are answered 404 (model_not_found) until one does`,
    });
  }
  if (previous?.snapshot !== undefined && next.snapshot !== undefined) {
    if (previous.hash !== next.hash)
      events.push(...snapshotEvents(previous.snapshot, next.snapshot));
  }
  return events.map((e) => ({ ...e, message: clipUtf8(e.message, EVENT_MESSAGE_MAX_BYTES) }));
}

function snapshotEvents(before: DesiredSnapshot, after: DesiredSnapshot): PoolEvent[] {
  const events: PoolEvent[] = [];
  const policyOf = (s: DesiredSnapshot) =>
    canonicalJson({ policy: s.policy, timeouts: s.timeouts });
  if (policyOf(before) !== policyOf(after)) {
    events.push({
      type: 'Normal',
      reason: Reason.PolicyChanged,
      message: 'Policy or timeouts changed',
    });
  }

  // The key is compared apart from the rest, so that a rotation is named as such.
  const withoutKey = ({ apiKey: _apiKey, ...rest }: EndpointSpec) => canonicalJson(rest);
  const old = new Map(before.endpoints.map((e) => [e.id, e]));
  const now = new Map(after.endpoints.map((e) => [e.id, e]));
  const added = after.endpoints.filter((e) => !old.has(e.id)).map((e) => e.id);
  const removed = before.endpoints.filter((e) => !now.has(e.id)).map((e) => e.id);
  const updated: string[] = [];
  const rotated = new Set<string>();
  for (const e of after.endpoints) {
    const o = old.get(e.id);
    if (o === undefined) continue;
    if (withoutKey(o) !== withoutKey(e)) updated.push(e.id);
    if (o.apiKey !== e.apiKey && o.apiKey !== undefined && e.apiKey !== undefined) {
      rotated.add(e.backend);
    }
  }
  const parts = [
    listed(added, 'added'),
    listed(removed, 'removed'),
    listed(updated, 'updated'),
  ].filter((p) => p !== '');
  if (parts.length > 0) {
    events.push({
      type: 'Normal',
      reason: Reason.EndpointsChanged,
      message: `Endpoints changed: ${parts.join('; ')}; ${plural(after.endpoints.length, 'endpoint')} in the snapshot`,
    });
  }
  for (const backend of rotated) {
    events.push({
      type: 'Normal',
      reason: Reason.ApiKeyChanged,
      message: `The API key of backend ${backend} changed`,
    });
  }
  return events;
}

function listed(ids: readonly string[], what: string): string {
  if (ids.length === 0) return '';
  const shown = ids.slice(0, MAX_LISTED_ENDPOINTS).join(', ');
  const more =
    ids.length > MAX_LISTED_ENDPOINTS ? ` and ${ids.length - MAX_LISTED_ENDPOINTS} more` : '';
  return `${ids.length} ${what} (${shown}${more})`;
}
