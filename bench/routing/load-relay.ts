/**
 * The controller's stream without Kubernetes, for `switchyard bench --load-source controller`:
 * the controller's own snapshot server (controller/stream/snapshot-server.ts) and load monitor
 * (lib/load-scrape/monitor.ts) in one process, fed the pool file's configuration instead of the
 * API server's InferencePool and EndpointSlices. The sidecars subscribe with `--controller` as in
 * Kubernetes, so one scraper serves all of them: R sidecars cost the servers one scrape a period,
 * not R, and the load reaches them over the same stream and code path as in a cluster.
 *
 *   node bench/routing/load-relay.ts <pool file> <scrape period ms>
 *
 * Prints its URL when it listens; stops on SIGTERM. Any bearer token is accepted (the benchmark's
 * processes run on loopback); the pool lives in namespace `bench`.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import type { PoolSnapshot } from '../../crds/snapshot.ts';
import { ControllerMetrics } from '../../controller/metrics.ts';
import { SnapshotServer } from '../../controller/stream/snapshot-server.ts';
import { LoadMonitor } from '../../lib/load-scrape/monitor.ts';
import { formatProblems, loadPoolText } from '../../sidecar/config/pool-file.ts';

/** The namespace the pool is served in: the sidecars subscribe with `--namespace bench`. */
const RELAY_NAMESPACE = 'bench';

const [poolFile, periodArg] = process.argv.slice(2);
const periodMs = Number(periodArg);
if (poolFile === undefined || !(periodMs > 0)) {
  process.stderr.write('usage: node bench/routing/load-relay.ts <pool file> <scrape period ms>\n');
  process.exit(2);
}
const loaded = loadPoolText(readFileSync(poolFile, 'utf8'), process.env);
if (!loaded.ok) {
  process.stderr.write(formatProblems(poolFile, loaded.problems) + '\n');
  process.exit(2);
}
const { pool } = loaded;
const key = `${RELAY_NAMESPACE}/${pool.name}`;
const logger = pino({ level: 'warn' });

const stream = new SnapshotServer({
  authenticator: {
    authenticate: () =>
      Promise.resolve({
        ok: true,
        identity: {
          namespace: RELAY_NAMESPACE,
          serviceAccount: 'bench',
          podName: undefined,
          podUid: undefined,
        },
      }),
  },
  logger,
  metrics: new ControllerMetrics(),
  heartbeatMs: 30_000,
  tls: undefined,
  poolExists: (k) => k === key,
  onSidecarChange: () => undefined,
});
const snapshot: PoolSnapshot = {
  version: 1,
  hash: pool.hash,
  pool: { namespace: RELAY_NAMESPACE, name: pool.name },
  policy: pool.policy,
  timeouts: pool.timeouts,
  endpoints: pool.endpoints,
};
stream.publish(key, snapshot, performance.now());

const load = new LoadMonitor({
  periodMs,
  logger,
  pools: () => stream.subscribedEndpoints(),
  publish: (k, poolLoad) => stream.publishLoad(k, poolLoad),
});
load.start();

stream.server.listen(0, '127.0.0.1', () => {
  const { port } = stream.server.address() as AddressInfo;
  process.stdout.write(`http://127.0.0.1:${port}\n`);
});
process.once('SIGTERM', () => {
  load.stop();
  stream.close();
  process.exit(0);
});
