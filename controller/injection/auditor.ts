/**
 * Tells a pod that asked for the sidecar but did not get it. The webhook's `failurePolicy:
 * Ignore` keeps pod creation working while the controller is down, at the price of pods that come
 * up without the sidecar; this finds them (a watch of pods labelled `switchyard.dev/pool`, so only
 * those are cached) and the leader records one Warning Event on each, which `kubectl describe pod`
 * and `kubectl get events` show, and counts them in `switchyard_controller_pods_not_injected`.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import {
  INJECTED_ANNOTATION,
  POOL_LABEL,
  SIDECAR_NAME,
  SKIPPED_ANNOTATION,
  type PodLike,
} from './pod-patch.ts';
import { recordEvent } from '../kube/event-recorder.ts';
import type { KubeRaw } from '../kube/kube-raw.ts';
import { SupervisedInformer } from '../kube/supervised-informer.ts';

type Pod = PodLike &
  KubernetesObject & {
    status?: { phase?: string };
    metadata?: { uid?: string; deletionTimestamp?: unknown };
    spec?: { serviceAccountName?: string };
  };

export const NOT_INJECTED_REASON = 'SidecarNotInjected';
export const SKIPPED_REASON = 'SidecarInjectionSkipped';

/** Why `pod` lacks the sidecar, as an Event; undefined when it has it (or should not). */
export function missingSidecarEvent(
  pod: Pod,
  excludeNamespaces: readonly string[],
): { reason: string; message: string } | undefined {
  const pool = pod.metadata?.labels?.[POOL_LABEL];
  const namespace = pod.metadata?.namespace ?? '';
  if (pool === undefined || excludeNamespaces.includes(namespace)) return undefined;
  if (pod.metadata?.deletionTimestamp !== undefined) return undefined;
  const phase = pod.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return undefined;
  const containers = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  if (containers.some((c) => c.name === SIDECAR_NAME)) return undefined;
  const annotations = pod.metadata?.annotations ?? {};
  const skipped = annotations[SKIPPED_ANNOTATION];
  if (skipped !== undefined)
    return { reason: SKIPPED_REASON, message: `switchyard sidecar not injected: ${skipped}` };
  if (annotations[INJECTED_ANNOTATION] !== undefined) return undefined;
  return {
    reason: NOT_INJECTED_REASON,
    message:
      `Pod is labelled ${POOL_LABEL}=${pool} but has no switchyard sidecar: the injection webhook ` +
      `did not answer when the pod was created (failurePolicy Ignore admitted it as it was). ` +
      `Check the switchyard controller, then delete the pod so that it is created again with the sidecar.`,
  };
}

export interface InjectionAuditorOptions {
  raw: KubeRaw;
  logger: Logger;
  identity: string;
  excludeNamespaces: () => readonly string[];
  isLeader: () => boolean;
  onRestart: (reason: string) => void;
}

export class InjectionAuditor {
  private readonly informer: SupervisedInformer<Pod>;
  private readonly options: InjectionAuditorOptions;
  /** Pod UIDs already told (by this replica while leader); an Event per pod, not per resync. */
  private readonly told = new Set<string>();

  constructor(options: InjectionAuditorOptions) {
    this.options = options;
    this.informer = new SupervisedInformer<Pod>({
      name: 'pods',
      api: options.raw,
      path: '/api/v1/pods',
      labelSelector: POOL_LABEL,
      logger: options.logger,
      onChange: (pod, kind) => {
        if (kind === 'delete') this.told.delete(pod.metadata?.uid ?? '');
        else this.audit(pod);
      },
      onRestart: options.onRestart,
    });
  }

  start(): Promise<void> {
    return this.informer.start();
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }

  /**
   * The watched pods, read by the stream's TokenReview cache (controller/stream/review-cache.ts):
   * a pod-bound token is reused only while its pod is here.
   */
  get hasSynced(): boolean {
    return this.informer.hasSynced;
  }

  get(namespace: string, name: string): Pod | undefined {
    return this.informer.get(name, namespace);
  }

  /** Labelled pods without the sidecar, now (for the metric). */
  notInjectedCount(): number {
    const exclude = this.options.excludeNamespaces();
    return this.informer.list().filter((p) => missingSidecarEvent(p, exclude) !== undefined).length;
  }

  /** The leader (re)checks every cached pod, e.g. after it became leader. */
  auditAll(): void {
    for (const pod of this.informer.list()) this.audit(pod);
  }

  private audit(pod: Pod): void {
    if (!this.options.isLeader()) return;
    const uid = pod.metadata?.uid ?? '';
    if (uid === '' || this.told.has(uid)) return;
    const event = missingSidecarEvent(pod, this.options.excludeNamespaces());
    if (event === undefined) return;
    this.told.add(uid);
    const namespace = pod.metadata?.namespace ?? 'default';
    const name = pod.metadata?.name ?? '';
    this.options.logger.warn({ namespace, pod: name, reason: event.reason }, 'pod has no sidecar');
    recordEvent(
      this.options.raw,
      {
        involvedObject: { apiVersion: 'v1', kind: 'Pod', name, namespace, uid },
        type: 'Warning',
        ...event,
      },
      this.options.identity,
    ).catch((err: unknown) => {
      this.told.delete(uid); // try again on the next change or resync
      this.options.logger.warn({ err: (err as Error).message }, 'could not record an Event');
    });
  }
}
