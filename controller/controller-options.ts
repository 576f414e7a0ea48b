/**
 * `switchyard controller`'s flags, checked and turned into the controller's options. Pure: the
 * command reads the files the flags name (and the controller's own service-account token) and
 * passes their text in, so every rule here is a unit test away (controller-options.test.ts) and
 * the command stays a thin shell: flags in, files read, `startController`.
 */
import { parse as parseYaml } from 'yaml';
import type { HostPort } from '../lib/listen.ts';
import { loadScrapePeriodProblem } from '../lib/load-scrape/period.ts';
import type { ControllerOptions } from './controller.ts';
import { parseInjectionConfig } from './injection/config.ts';
import { ownersOf } from './kube/owners.ts';
import type { TlsConfig } from './tls/source.ts';

/** The flags as commander parses them (cli/controller-command.ts defines each). */
export interface ControllerFlags {
  kubeconfig?: string | undefined;
  listen: HostPort;
  admin: HostPort;
  tlsCertFile?: string | undefined;
  tlsKeyFile?: string | undefined;
  tlsCaFile?: string | undefined;
  tlsSecret?: string | undefined;
  tlsSecretNamespace?: string | undefined;
  tlsSan: string[];
  injectionConfig?: string | undefined;
  webhookConfigName?: string | undefined;
  insecureHttp?: boolean | undefined;
  heartbeat: number;
  loadScrapeEvery: number;
  /** The longest a positive TokenReview is reused, ms (`--token-review-cache`). */
  tokenReviewCache: number;
  leaseNamespace: string;
  leaseName: string;
  identity: string;
  podUid?: string | undefined;
  /** Per subscriber, bytes a second of placements events; 0 is off (default 8192). */
  placementBytesPerSecond?: number | undefined;
  /** The address other replicas reach this one's stream at (default $POD_IP). */
  advertiseAddress?: string | undefined;
}

/** What the command read for the flags: the text of `--injection-config`, the pod's own token. */
export interface ControllerFiles {
  /** Present when `--injection-config` is given: its text, or why it could not be read. */
  injectionConfig?: { ok: true; text: string } | { ok: false; message: string } | undefined;
  /** The controller's own service-account token, when it runs in a pod. */
  serviceAccountToken: string | undefined;
  /** Why no kubeconfig can be found, when `--kubeconfig` is not given and none is. */
  kubeconfigMissing?: string | undefined;
}

export type ControllerPlan =
  | {
      ok: true;
      options: Omit<ControllerOptions, 'kubeConfig' | 'logger'>;
      /** Worth a log line at start (what the controller's objects will not be owned by). */
      notes: string[];
    }
  | { ok: false; problem: string };

/**
 * Leader election: a new leader within 15 s of a replica's death, renewals every 2 s, so a
 * renewal can fail several times (an API server restart) before the lease lapses.
 */
export const LEASE_DURATION_MS = 15_000;
export const LEASE_RENEW_EVERY_MS = 2_000;
/** A sidecar silent this long (no stream, no report; it reports every 10 s) is not counted. */
export const SIDECAR_STALE_AFTER_MS = 60_000;
/** Status is refreshed from reports each second; only changes are written. */
export const STATUS_EVERY_MS = 1_000;
/** Per subscriber, the default bytes a second of `placements` events (issue 45). */
export const DEFAULT_PLACEMENT_BYTES_PER_SECOND = 8192;
/** A tenth of a second's worth must hold an event with a placement of a dozen hashes. */
export const MIN_PLACEMENT_BYTES_PER_SECOND = 2000;
/** Each replica publishes its sidecars for the leader every 5 s. */
export const REPLICA_SUMMARY_EVERY_MS = 5_000;

/**
 * `--token-review-cache` bounds: under the 60 s a token nothing else vouches for gets, it would
 * only add reviews; past an hour, a deleted ServiceAccount's tokens would work too long.
 */
export const TOKEN_REVIEW_CACHE_MIN_MS = 60_000;
export const TOKEN_REVIEW_CACHE_MAX_MS = 3_600_000;

export function planControllerOptions(
  flags: ControllerFlags,
  files: ControllerFiles,
): ControllerPlan {
  const refuse = (problem: string): ControllerPlan => ({ ok: false, problem });
  const scrapeProblem = loadScrapePeriodProblem(flags.loadScrapeEvery);
  if (scrapeProblem !== undefined) return refuse(scrapeProblem);
  const placementBytes = flags.placementBytesPerSecond ?? DEFAULT_PLACEMENT_BYTES_PER_SECOND;
  if (
    !Number.isSafeInteger(placementBytes) ||
    placementBytes < 0 ||
    (placementBytes > 0 && placementBytes < MIN_PLACEMENT_BYTES_PER_SECOND)
  )
    return refuse(
      `--placement-bytes-per-second ${placementBytes}: give 0 (off) or a whole number of at least ${MIN_PLACEMENT_BYTES_PER_SECOND} (an event, a tenth of it, must hold a placement)`,
    );
  if (
    flags.advertiseAddress !== undefined &&
    flags.advertiseAddress !== '' &&
    // An IPv4 address or DNS name, or an IPv6 address (hex digits and colons).
    !/^([a-z0-9]([a-z0-9.-]*[a-z0-9])?|[0-9a-f.]*:[0-9a-f:.]*)$/i.test(flags.advertiseAddress)
  )
    return refuse(
      `--advertise-address ${flags.advertiseAddress}: give the IP address (or DNS name) the other replicas reach this one at ($POD_IP)`,
    );
  if (
    !(flags.tokenReviewCache >= TOKEN_REVIEW_CACHE_MIN_MS) ||
    flags.tokenReviewCache > TOKEN_REVIEW_CACHE_MAX_MS
  )
    return refuse(
      `--token-review-cache must be between 1m and 1h (it is ${flags.tokenReviewCache} ms): how long a sidecar token's TokenReview is reused`,
    );
  // Without a configuration the client would quietly talk to http://localhost:8080.
  if (files.kubeconfigMissing !== undefined) return refuse(files.kubeconfigMissing);

  let tls: TlsConfig | undefined;
  if (flags.tlsSecret !== undefined) {
    if (flags.tlsCertFile !== undefined || flags.tlsKeyFile !== undefined)
      return refuse(
        'give either --tls-secret (self-managed) or --tls-cert-file/--tls-key-file, not both',
      );
    if (flags.tlsSan.length === 0)
      return refuse(
        '--tls-secret needs --tls-san: the names sidecars and the API server reach the controller by',
      );
    tls = {
      kind: 'self-managed',
      namespace: flags.tlsSecretNamespace ?? flags.leaseNamespace,
      secretName: flags.tlsSecret,
      names: flags.tlsSan,
    };
  } else if (flags.tlsCertFile !== undefined || flags.tlsKeyFile !== undefined) {
    if (flags.tlsCertFile === undefined || flags.tlsKeyFile === undefined)
      return refuse('give both --tls-cert-file and --tls-key-file');
    tls = {
      kind: 'files',
      files: { certFile: flags.tlsCertFile, keyFile: flags.tlsKeyFile, caFile: flags.tlsCaFile },
    };
  } else if (flags.insecureHttp !== true) {
    return refuse(
      'the snapshot stream carries tokens and API keys: give --tls-secret (self-managed), or --tls-cert-file and --tls-key-file (or --insecure-http for a test)',
    );
  }

  let injection: ControllerOptions['injection'];
  if (flags.injectionConfig !== undefined) {
    if (tls === undefined)
      return refuse('--injection-config needs TLS: the API server calls webhooks over HTTPS only');
    const read = files.injectionConfig;
    if (read === undefined || !read.ok)
      return refuse(`cannot read --injection-config: ${read?.message ?? 'not read'}`);
    let parsed: unknown;
    try {
      parsed = parseYaml(read.text);
    } catch (err) {
      return refuse(
        `--injection-config ${flags.injectionConfig} is not YAML or JSON: ${(err as Error).message}`,
      );
    }
    const result = parseInjectionConfig(parsed);
    if (!result.ok)
      return refuse(
        `--injection-config ${flags.injectionConfig} is invalid:\n  ${result.errors.join('\n  ')}`,
      );
    injection = { config: result.config, webhookConfigName: flags.webhookConfigName };
  } else if (flags.webhookConfigName !== undefined) {
    return refuse('--webhook-config-name needs --injection-config');
  }

  // What the controller creates itself (Leases, the TLS Secret) is owned by its Pod or its
  // ServiceAccount, so `helm uninstall` leaves none of it (controller/kube/owners.ts).
  const { owners, notes } = ownersOf({
    token: files.serviceAccountToken,
    namespace: flags.leaseNamespace,
    pod: flags.podUid === undefined ? undefined : { name: flags.identity, uid: flags.podUid },
  });
  return {
    ok: true,
    notes,
    options: {
      owners,
      listen: flags.listen,
      admin: flags.admin,
      tls,
      injection,
      heartbeatMs: flags.heartbeat,
      lease: {
        namespace: flags.leaseNamespace,
        name: flags.leaseName,
        identity: flags.identity,
        durationMs: LEASE_DURATION_MS,
        renewEveryMs: LEASE_RENEW_EVERY_MS,
      },
      sidecarStaleAfterMs: SIDECAR_STALE_AFTER_MS,
      statusEveryMs: STATUS_EVERY_MS,
      replicaSummaryEveryMs: REPLICA_SUMMARY_EVERY_MS,
      tokenReviewCacheMs: flags.tokenReviewCache,
      loadScrapeEveryMs: flags.loadScrapeEvery,
      placementBytesPerSecond: placementBytes,
      advertiseAddress: flags.advertiseAddress,
    },
  };
}
