/**
 * The controller's stream without Kubernetes, for `switchyard bench --load-source controller`:
 * the controller's own snapshot server (controller/stream/snapshot-server.ts) and load monitor
 * (lib/load-scrape/monitor.ts) in one process, serving the snapshot the controller's reconcile
 * core (controller/core/desired-snapshot.ts) computes from the pool file's spec instead of an
 * InferencePool and its EndpointSlices from the API server. The sidecars subscribe with
 * `--controller` as in Kubernetes, so one scraper serves all of them: R sidecars cost the servers
 * one scrape a period, not R, and the load reaches them over the same stream and code path as in
 * a cluster.
 *
 *   node bench/routing/load-relay.ts <pool file> <scrape period ms>
 *
 * Prints its URL when it listens; stops on SIGTERM. Any bearer token is accepted (the benchmark's
 * processes run on loopback); the pool lives in namespace `bench`.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { parsePoolYaml } from '../../crds/pool-document.ts';
import { validatePool } from '../../crds/validate.ts';
import { desiredSnapshot } from '../../controller/core/desired-snapshot.ts';
import { ControllerMetrics } from '../../controller/metrics.ts';
import { SnapshotServer } from '../../controller/stream/snapshot-server.ts';
import { LoadMonitor } from '../../lib/load-scrape/monitor.ts';
import { formatProblems } from '../../sidecar/config/pool-file.ts';

/** The namespace the pool is served in: the sidecars subscribe with `--namespace bench`. */
const RELAY_NAMESPACE = 'bench';

const [poolFile, periodArg] = process.argv.slice(2);
const periodMs = Number(periodArg);
if (poolFile === undefined || !(periodMs > 0)) {
  process.stderr.write('usage: node bench/routing/load-relay.ts <pool file> <scrape period ms>\n');
  process.exit(2);
}
// The pool file's problems, each naming its field; then the snapshot exactly as the controller's
// reconcile core computes it from an InferencePool of that spec (URL backends need no Service).
const parsed = parsePoolYaml(readFileSync(poolFile, 'utf8'));
const validated = parsed.ok ? validatePool(parsed.document) : parsed;
if (!validated.ok) {
  process.stderr.write(formatProblems(poolFile, validated.errors) + '\n');
  process.exit(2);
}
const name = validated.pool.metadata.name;
const desired = desiredSnapshot({
  pool: { ...validated.pool, metadata: { ...validated.pool.metadata, namespace: RELAY_NAMESPACE } },
  services: new Map(),
  slicesByService: new Map(),
  secrets: new Map(),
});
if (desired.snapshot === undefined) {
  const why = desired.conditions.map((c) => `${c.type}: ${c.message}`).join('; ');
  process.stderr.write(`${poolFile}: the controller would send no snapshot of it (${why})\n`);
  process.exit(2);
}
const key = `${RELAY_NAMESPACE}/${name}`;
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
          // Bound to no pod: the stream withholds API keys, and the bench's pool files hold none.
          pod: undefined,
        },
      }),
  },
  logger,
  metrics: new ControllerMetrics(),
  // The controller's default (`switchyard controller --heartbeat`): sidecars reconnect after 35 s
  // of silence.
  heartbeatMs: 10_000,
  tls: undefined,
  poolExists: (k) => k === key,
  onSidecarChange: () => undefined,
});
stream.publish(key, { ...desired.snapshot, version: 1 }, performance.now());

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
