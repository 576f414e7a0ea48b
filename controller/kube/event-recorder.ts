import type { KubeRaw } from './kube-raw.ts';

export interface EventToRecord {
  /** The object the Event is about. */
  involvedObject: {
    apiVersion: string;
    kind: string;
    name: string;
    namespace: string;
    uid?: string | undefined;
  };
  type: 'Normal' | 'Warning';
  /** A stable CamelCase code. */
  reason: string;
  /** For a person; never a Secret's value. */
  message: string;
}

/**
 * Posts a core/v1 Event (what `kubectl describe` shows). `reportingInstance` names the replica.
 * Throws on an API error; callers log it (a lost Event must never fail a reconcile).
 */
export async function recordEvent(
  raw: KubeRaw,
  event: EventToRecord,
  reportingInstance: string,
): Promise<void> {
  const { involvedObject } = event;
  const now = new Date().toISOString();
  await raw.request('POST', `/api/v1/namespaces/${involvedObject.namespace}/events`, {
    apiVersion: 'v1',
    kind: 'Event',
    metadata: {
      generateName: `${involvedObject.name}.`,
      namespace: involvedObject.namespace,
    },
    involvedObject,
    type: event.type,
    reason: event.reason,
    message: event.message,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
    source: { component: 'switchyard-controller' },
    reportingComponent: 'switchyard.dev/controller',
    reportingInstance,
  });
}
