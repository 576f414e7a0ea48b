/**
 * The mutating admission webhook that injects the sidecar (docs/injection.md): reads an
 * AdmissionReview (admission.k8s.io/v1), asks the pure core (pod-patch.ts) what to patch and
 * answers. It never denies a pod: with `failurePolicy: Ignore` an outage only means pods come up
 * without the sidecar (the injection auditor then says so on the pod), and a pod that cannot take
 * the sidecar is admitted as it is, annotated and warned about.
 */
import type { AnyRequest, AnyResponse } from '../../lib/dual-http-server.ts';
import type { Logger } from 'pino';
import { objectKey, type PoolKey } from '../core/pool-index.ts';
import type { InjectionConfig } from './config.ts';
import { followedPools } from './followed-pools.ts';
import { decideInjection, type PodLike } from './pod-patch.ts';
import type { ControllerMetrics } from '../metrics.ts';

export const WEBHOOK_PATH = '/mutate/pods';
const MAX_REVIEW_BYTES = 8 * 1024 * 1024;

interface AdmissionRequest {
  uid?: unknown;
  kind?: { group?: string; version?: string; kind?: string };
  operation?: string;
  namespace?: string;
  object?: unknown;
}

export interface InjectionWebhookOptions {
  config: () => InjectionConfig;
  caBundle: () => string;
  /** The pools the controller knows; until its cache has synced, no pod is told its pool is missing. */
  pools: { readonly hasSynced: boolean; has(key: PoolKey): boolean };
  logger: Logger;
  metrics: ControllerMetrics;
}

function reply(res: AnyResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/** An AdmissionReview answer that admits the pod, with a patch and warnings when there are any. */
function review(uid: string, patch?: unknown[], warnings: string[] = []): Record<string, unknown> {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    response: {
      uid,
      allowed: true,
      ...(patch === undefined || patch.length === 0
        ? {}
        : { patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') }),
      ...(warnings.length === 0 ? {} : { warnings }),
    },
  };
}

export function injectionWebhook(
  options: InjectionWebhookOptions,
): (req: AnyRequest, res: AnyResponse) => Promise<void> {
  const { logger, metrics } = options;
  return async (req, res) => {
    if (req.method !== 'POST') {
      reply(res, 405, {
        error: { code: 'method_not_allowed', message: 'POST an AdmissionReview.' },
      });
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_REVIEW_BYTES) {
        reply(res, 413, {
          error: { code: 'body_too_large', message: 'AdmissionReview too large.' },
        });
        return;
      }
      chunks.push(chunk);
    }
    let body: { apiVersion?: string; kind?: string; request?: AdmissionRequest };
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof body;
    } catch {
      reply(res, 400, { error: { code: 'invalid_json', message: 'The body is not JSON.' } });
      return;
    }
    const request = body?.request;
    if (body?.kind !== 'AdmissionReview' || typeof request?.uid !== 'string') {
      reply(res, 400, {
        error: {
          code: 'invalid_review',
          message: 'Expected an admission.k8s.io/v1 AdmissionReview with request.uid.',
        },
      });
      return;
    }
    const uid = request.uid;
    const namespace = request.namespace ?? '';
    if (request.kind?.kind !== 'Pod' || request.operation !== 'CREATE') {
      reply(res, 200, review(uid));
      return;
    }
    const pod = (request.object ?? {}) as PodLike;
    const podName = pod.metadata?.name ?? `${pod.metadata?.generateName ?? ''}*`;
    const pools = followedPools(pod.metadata).pools;
    let decision;
    try {
      decision = decideInjection({
        pod,
        namespace,
        config: options.config(),
        caBundle: options.caBundle(),
        poolExists: (name) =>
          options.pools.hasSynced ? options.pools.has(objectKey(namespace, name)) : undefined,
      });
    } catch (err) {
      // An object shape the core did not expect: admit it untouched rather than block a rollout.
      metrics.injections.inc({ result: 'error' });
      logger.error({ namespace, pod: podName, err: (err as Error).message }, 'injection failed');
      reply(res, 200, review(uid, undefined, [`switchyard: sidecar not injected: internal error`]));
      return;
    }
    metrics.injections.inc({ result: decision.kind });
    switch (decision.kind) {
      case 'ignored':
      case 'unchanged':
        reply(res, 200, review(uid));
        return;
      case 'skipped':
        logger.warn(
          { namespace, pod: podName, pools, reason: decision.reason },
          'sidecar not injected',
        );
        reply(res, 200, review(uid, decision.patch, decision.warnings));
        return;
      case 'injected':
        logger.info({ namespace, pod: podName, pools }, 'sidecar injected');
        reply(res, 200, review(uid, decision.patch, decision.warnings));
    }
  };
}
