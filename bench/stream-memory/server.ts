/**
 * The server side of `npm run bench:stream-memory`: the controller's own snapshot server
 * (controller/stream/snapshot-server.ts) over TLS, with `--pools` pools of `--endpoints`
 * endpoints each, accepting any bearer token (a TokenReview is not what is measured). Prints
 * `port <n>` when listening; `GET /bench/memory` answers its memory after a full GC and how many
 * streams and TCP connections it holds.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import { ControllerMetrics } from '../../controller/metrics.ts';
import { SnapshotServer } from '../../controller/stream/snapshot-server.ts';
import { balancePool } from '../../harness/pool-file.ts';
import { loadPoolText } from '../../sidecar/config/pool-file.ts';
import { numberFlag, readFlags } from '../common/flags.ts';
import { NAMESPACE } from './constants.ts';

const flags = readFlags(
  {
    cert: { type: 'string' },
    key: { type: 'string' },
    pools: { type: 'string' },
    endpoints: { type: 'string' },
  },
  'bench/stream-memory/server.ts --cert F --key F --pools N --endpoints N (started by main.ts)\n',
);
const pools = numberFlag('pools', flags.pools, { min: 1, integer: true });
const endpoints = numberFlag('endpoints', flags.endpoints, { min: 1, integer: true });

/** Pool `i`: a Balance pool of `endpoints` loopback URLs nothing listens on (no traffic is sent). */
function snapshotOf(i: number): PoolSnapshot {
  const urls = Array.from({ length: endpoints }, (_, e) => `http://127.0.0.1:${20_000 + e}`);
  const names = urls.map((_, e) => `b${e}`);
  const loaded = loadPoolText(balancePool(urls, '', names), {});
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
  const { hash, policy, timeouts } = loaded.pool;
  return {
    version: 1,
    hash,
    pool: { namespace: NAMESPACE, name: `pool-${i}` },
    policy,
    timeouts,
    endpoints: loaded.pool.endpoints,
  };
}

const metrics = new ControllerMetrics();
const server = new SnapshotServer({
  authenticator: {
    authenticate: (authorization) =>
      Promise.resolve(
        authorization?.startsWith('Bearer ') === true
          ? {
              ok: true,
              identity: {
                namespace: NAMESPACE,
                serviceAccount: 'app',
                podName: undefined,
                podUid: undefined,
                pod: undefined,
              },
            }
          : { ok: false, reason: 'no bearer token' },
      ),
  },
  logger: pino({ level: 'warn' }),
  metrics,
  heartbeatMs: 10_000,
  tls: { cert: readFileSync(flags.cert ?? '', 'utf8'), key: readFileSync(flags.key ?? '', 'utf8') },
  poolExists: () => true,
  onSidecarChange: () => undefined,
  routes: {
    '/bench/memory': (_req, res) => {
      globalThis.gc?.();
      const m = process.memoryUsage();
      const body = JSON.stringify({
        rss: m.rss,
        heapUsed: m.heapUsed,
        external: m.external,
        streams: server.connectedCount(),
        connections: server.listener.connectionCount,
      });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
      return Promise.resolve();
    },
  },
});
for (let i = 0; i < pools; i++)
  server.publish(`${NAMESPACE}/pool-${i}`, snapshotOf(i), performance.now());
server.listener.server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`port ${(server.listener.server.address() as AddressInfo).port}\n`);
});
process.on('SIGTERM', () => {
  server.close();
  process.exit(0);
});
