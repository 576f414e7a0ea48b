/**
 * `switchyard relay`: the controller's stream without Kubernetes. It serves the pools of one or
 * more pool files to sidecars started with `--controller`, exactly as the controller serves an
 * InferencePool: the same snapshot server (controller/stream/snapshot-server.ts), the same
 * scraping of the servers' load (one scraper for every sidecar, not one per sidecar), and the
 * same relay of placements between sidecars (issue 45: every sidecar routes as if it saw the
 * whole fleet's prompts). A fleet of standalone sidecars gets what a Kubernetes one has from one
 * small process off the request path: if the relay stops, the sidecars keep routing on what they
 * last received (and their snapshot cache files).
 *
 * Authentication is one shared bearer token (`--token-file`) instead of TokenReviews; without
 * one the relay accepts any token and listens on loopback only, and it withholds API keys.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { PoolSnapshot } from '../crds/snapshot.ts';
import { ControllerMetrics } from '../controller/metrics.ts';
import { loadPublisher } from '../controller/stream/load-publisher.ts';
import { SnapshotServer } from '../controller/stream/snapshot-server.ts';
import type { AuthResult } from '../controller/stream/token-auth.ts';
import { formatProblems, loadPoolFile, watchPoolFile } from '../sidecar/config/pool-file.ts';

export interface RelayOptions {
  /** Pool files, one pool each; pool names must differ. */
  poolFiles: readonly string[];
  /** The namespace the pools are served in: sidecars subscribe with `--namespace`. */
  namespace: string;
  host: string;
  port: number;
  /** The bearer token sidecars must present; undefined: any (loopback only, keys withheld). */
  token: string | undefined;
  /** PEM; without it plain HTTP. */
  tls: { cert: string; key: string } | undefined;
  loadScrapeEveryMs: number;
  /** Per subscriber; 0: placements are not relayed. */
  placementBytesPerSecond: number;
  heartbeatMs: number;
  env: Record<string, string | undefined>;
  logger: Logger;
}

export interface RunningRelay {
  url: string;
  metrics: ControllerMetrics;
  close(): void;
}

/** The pools' files, each as its last valid content was served. */
interface ServedFile {
  key: string;
  snapshot: PoolSnapshot | undefined;
  watcher: { close(): void } | undefined;
}

/** A message naming the problem for `switchyard relay` to print before it exits with 2. */
export class RelayConfigError extends Error {}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

export async function startRelay(options: RelayOptions): Promise<RunningRelay> {
  const { logger, namespace } = options;
  if (options.token === undefined && !LOOPBACK.has(options.host))
    throw new RelayConfigError(
      `--listen ${options.host} is not loopback: give --token-file so that only your sidecars can subscribe`,
    );
  if (options.token !== undefined && options.token.trim() === '')
    throw new RelayConfigError('--token-file is empty');
  const served = new Map<string, ServedFile>();
  for (const file of options.poolFiles) {
    const snapshot = await readSnapshot(file, options, 1);
    if (!snapshot.ok) throw new RelayConfigError(snapshot.message);
    const key = `${namespace}/${snapshot.value.pool.name}`;
    const other = [...served.entries()].find(([, s]) => s.key === key);
    if (other !== undefined)
      throw new RelayConfigError(
        `${file} and ${other[0]} both define pool ${snapshot.value.pool.name}: pool names must differ`,
      );
    served.set(file, { key, snapshot: snapshot.value, watcher: undefined });
  }
  const keys = new Set([...served.values()].map((s) => s.key));
  const metrics = new ControllerMetrics();
  const expected =
    options.token === undefined ? undefined : digest(`Bearer ${options.token.trim()}`);
  const allPools = new Set([...served.values()].map((s) => s.key.slice(namespace.length + 1)));

  const stream = new SnapshotServer({
    authenticator: { authenticate: (authorization) => Promise.resolve(check(authorization)) },
    logger,
    metrics,
    heartbeatMs: options.heartbeatMs,
    tls: options.tls,
    poolExists: (key) => keys.has(key),
    onSidecarChange: () => undefined,
    // The controller's metrics (load scrapes, placements relayed and dropped, streams open) on the
    // relay's own port: it has no admin port of its own.
    routes: {
      '/metrics': async (_req, res) => {
        const text = await metrics.registry.metrics();
        res.writeHead(200, { 'content-type': metrics.registry.contentType });
        res.end(text);
      },
    },
    ...(options.placementBytesPerSecond > 0
      ? { placements: { bytesPerSecond: options.placementBytesPerSecond } }
      : {}),
  });

  function check(authorization: string | undefined): AuthResult {
    if (authorization === undefined || !authorization.startsWith('Bearer '))
      return { ok: false, reason: 'no bearer token' };
    if (expected !== undefined && !timingSafeEqual(digest(authorization.trim()), expected))
      return { ok: false, reason: 'not the relay’s token (--token-file)' };
    return {
      ok: true,
      identity: {
        namespace,
        serviceAccount: 'relay',
        podName: undefined,
        podUid: undefined,
        // With the shared token a sidecar is trusted with every pool's API keys, as a pod that
        // follows the pool is in Kubernetes; without one it is bound to nothing: keys withheld.
        pod: expected === undefined ? undefined : { name: 'relay-client', follows: allPools },
      },
    };
  }

  for (const s of served.values()) stream.publish(s.key, s.snapshot!, performance.now());

  // A changed pool file is served as a new snapshot version; an invalid change is logged and the
  // last good one stays, as the controller does with an invalid InferencePool.
  for (const [file, s] of served) {
    let version = 1;
    s.watcher = watchPoolFile(file, () => {
      void readSnapshot(file, options, version + 1).then((next) => {
        if (!next.ok) {
          logger.error(
            { file, problems: next.message },
            'pool file change rejected; the last good one stays',
          );
          return;
        }
        if (`${namespace}/${next.value.pool.name}` !== s.key) {
          logger.error(
            { file },
            'a pool file may not rename its pool while the relay runs; change ignored',
          );
          return;
        }
        if (next.value.hash === s.snapshot?.hash) return;
        version += 1;
        s.snapshot = next.value;
        stream.publish(s.key, next.value, performance.now());
        logger.info({ file, version }, 'pool file changed; new snapshot sent');
      });
    });
  }

  const load = loadPublisher(stream, options.loadScrapeEveryMs, logger, metrics);
  load?.start();

  await new Promise<void>((resolve, reject) => {
    stream.listener.server.once('error', reject);
    stream.listener.server.listen(options.port, options.host, () => {
      stream.listener.server.off('error', reject);
      resolve();
    });
  });
  const { port } = stream.listener.server.address() as AddressInfo;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `${options.tls === undefined ? 'http' : 'https'}://${host}:${port}`;
  return {
    url,
    metrics,
    close: () => {
      load?.stop();
      for (const s of served.values()) s.watcher?.close();
      stream.close();
    },
  };
}

type Read = { ok: true; value: PoolSnapshot } | { ok: false; message: string };

async function readSnapshot(file: string, options: RelayOptions, version: number): Promise<Read> {
  const loaded = await loadPoolFile(file, options.env);
  if (!loaded.ok) return { ok: false, message: formatProblems(file, loaded.problems) };
  const { name, hash, policy, endpoints, timeouts } = loaded.pool;
  return {
    ok: true,
    value: {
      version,
      hash,
      pool: { namespace: options.namespace, name },
      policy,
      timeouts,
      endpoints,
    },
  };
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** Reads `--token-file`: the shared secret, surrounding whitespace trimmed. */
export function readTokenFile(path: string): string {
  return readFileSync(path, 'utf8').trim();
}
