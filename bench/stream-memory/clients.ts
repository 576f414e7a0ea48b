/**
 * The client side of `npm run bench:stream-memory`: `--sidecars` sidecars' connections to the
 * controller, each following `--pools-per-sidecar` pools, in one process. Prints `ready <n>` once
 * every stream has delivered its snapshot and sent its first report; runs until SIGTERM.
 *
 * - `--mode http2`: the sidecar's own client (sidecar/config/controller/controller-client.ts),
 *   one `ControllerConnections` per sidecar shared by its pools, as `switchyard sidecar` does.
 * - `--mode http1`: the wire shape of sidecars before 2026-12-07, with node:https: per pool a
 *   stream (`GET`, a connection of its own) and one kept-alive connection for its reports.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { reportPath, snapshotStreamPath, type SidecarReport } from '../../crds/snapshot.ts';
import {
  ControllerConnections,
  startControllerClient,
} from '../../sidecar/config/controller/controller-client.ts';
import { numberFlag, readFlags, usageError } from '../common/flags.ts';
import { NAMESPACE } from './constants.ts';

const flags = readFlags(
  {
    mode: { type: 'string' },
    url: { type: 'string' },
    ca: { type: 'string' },
    sidecars: { type: 'string' },
    'pools-per-sidecar': { type: 'string' },
    pools: { type: 'string' },
  },
  'bench/stream-memory/clients.ts --mode http1|http2 --url U --ca F --sidecars N --pools-per-sidecar K --pools P (started by main.ts)\n',
);
const mode = flags.mode;
if (mode !== 'http1' && mode !== 'http2') usageError(`--mode http1|http2, got ${mode}`);
const sidecars = numberFlag('sidecars', flags.sidecars, { min: 1, integer: true });
const perSidecar = numberFlag('pools-per-sidecar', flags['pools-per-sidecar'], {
  min: 1,
  integer: true,
});
const pools = numberFlag('pools', flags.pools, { min: 1, integer: true });
const url = flags.url ?? usageError('--url is required');
const caFile = flags.ca ?? usageError('--ca is required');
const ca = readFileSync(caFile, 'utf8');
const tokenFile = join(tmpdir(), `switchyard-stream-memory-token-${process.pid}`);
writeFileSync(tokenFile, 'bench-token\n');
const REPORT_EVERY_MS = 10_000;
const silent = pino({ level: 'silent' });

/** One pool of one sidecar: resolves 200 ms after its snapshot arrived (its first report goes then). */
function followHttp2(sidecar: string, pool: string, connections: ControllerConnections) {
  return new Promise<void>((resolve) => {
    let applied = false;
    startControllerClient({
      controllerUrl: url,
      namespace: NAMESPACE,
      pool,
      tokenFile,
      caFile,
      sidecarId: sidecar,
      reportEveryMs: REPORT_EVERY_MS,
      connections,
      logger: silent,
      onSnapshot: () => {
        // The first report goes right after the snapshot is applied: give it a moment to land.
        if (!applied) setTimeout(resolve, 200);
        applied = true;
        return true;
      },
      currentEndpoints: () => [],
    });
  });
}

function followHttp1(sidecar: string, pool: string): Promise<void> {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  const report = (): Promise<void> =>
    new Promise((resolve) => {
      const body = JSON.stringify({
        sidecar,
        appliedVersion: 1,
        appliedHash: 'h',
        endpoints: [],
      } satisfies SidecarReport);
      const req = https.request(`${url}${reportPath(NAMESPACE, pool)}`, {
        method: 'POST',
        agent,
        ca,
        headers: {
          authorization: 'Bearer bench-token',
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      });
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve());
      });
      req.on('error', () => resolve());
      req.end(body);
    });
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${url}${snapshotStreamPath(NAMESPACE, pool)}?sidecar=${sidecar}&deltas=1`,
      {
        agent: false,
        ca,
        headers: {
          authorization: 'Bearer bench-token',
          accept: 'text/event-stream',
          'x-switchyard-protocol': '1',
        },
      },
      (res) => {
        let seen = '';
        let applied = false;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (applied) return; // later events (heartbeats) are read and dropped
          seen += chunk;
          if (!seen.includes('event: snapshot')) return;
          applied = true;
          setInterval(() => void report(), REPORT_EVERY_MS).unref();
          void report().then(resolve);
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const follows: (() => Promise<void>)[] = [];
for (let s = 0; s < sidecars; s++) {
  const sidecar = `app-${s}`;
  const connections = mode === 'http2' ? new ControllerConnections() : undefined;
  for (let j = 0; j < perSidecar; j++) {
    const pool = `pool-${(s * perSidecar + j) % pools}`;
    follows.push(() =>
      connections === undefined
        ? followHttp1(sidecar, pool)
        : followHttp2(sidecar, pool, connections),
    );
  }
}
// In batches, so that the handshakes do not all land at once on the 2-core machine.
for (let i = 0; i < follows.length; i += 50)
  await Promise.all(follows.slice(i, i + 50).map((follow) => follow()));
process.stdout.write(`ready ${follows.length}\n`);
process.on('SIGTERM', () => {
  rmSync(tokenFile, { force: true });
  process.exit(0);
});
setInterval(() => undefined, 60_000);
