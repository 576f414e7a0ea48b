/**
 * `npm run bench:stream-memory` (issue 46): what each sidecar's connection to the controller
 * costs the controller's memory, HTTP/1.1 (a stream connection and a report connection per pool,
 * the sidecar before 2026-12-07) side by side with HTTP/2 (one connection per sidecar for all
 * its pools, the sidecar now), in one run.
 *
 * Per case a fresh server process (the controller's own SnapshotServer over TLS, 1,000 pools × 20
 * endpoints, any token accepted) and one client process holding `--sidecars` sidecars; the
 * server's RSS is read (after a full GC) before the clients connect and once every stream has its
 * snapshot and has reported, plus a settle; the cost per sidecar is the difference over the
 * sidecars. With `--churn N`, every sidecar then disconnects and connects again N times (a
 * reconnect storm: a replica killed, a rollout) and the RSS is read again, and once more after
 * all have gone. `--allocators` runs each case on glibc's malloc and/or jemalloc (the
 * controller's allocator in the chart). Writes bench/results/stream-memory.json.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { allocatorEnv, parseAllocator, type Allocator } from '../../harness/allocator.ts';
import { cpuSeconds } from '../../harness/proc.ts';
import { makeServingTls } from '../../harness/tls.ts';
import { numberFlag, numberListFlag, readFlags, usageError } from '../common/flags.ts';
import { gitCommit, REPO } from '../common/repo.ts';

const HELP = `npm run bench:stream-memory -- [options]

  --sidecars N            sidecars per case (default 1000)
  --pools-per-sidecar K,… pools each sidecar follows, one case each (default 1,3)
  --modes M,…             http1 and/or http2 (default both)
  --pools N               pools on the server (default 1000)
  --endpoints N           endpoints per pool (default 20)
  --settle-seconds S      wait after all are connected before reading (default 10)
  --churn N               then every sidecar disconnects and connects again, N times, and the
                          server's memory is read again, and after all have gone (default 0)
  --allocators A,…        the server's C allocator, one case each: glibc and/or jemalloc
                          (preloaded as the chart runs the controller; default glibc)
  --out FILE              default bench/results/stream-memory.json
`;

const flags = readFlags(
  {
    sidecars: { type: 'string' },
    'pools-per-sidecar': { type: 'string' },
    modes: { type: 'string' },
    pools: { type: 'string' },
    endpoints: { type: 'string' },
    'settle-seconds': { type: 'string' },
    churn: { type: 'string' },
    allocators: { type: 'string' },
    out: { type: 'string' },
  },
  HELP,
);
const sidecars = numberFlag('sidecars', flags.sidecars, { fallback: 1000, min: 1, integer: true });
const pools = numberFlag('pools', flags.pools, { fallback: 1000, min: 1, integer: true });
const endpoints = numberFlag('endpoints', flags.endpoints, { fallback: 20, min: 1, integer: true });
const settleMs =
  1000 * numberFlag('settle-seconds', flags['settle-seconds'], { fallback: 10, min: 0 });
const perSidecar = numberListFlag('pools-per-sidecar', flags['pools-per-sidecar'] ?? '1,3', 1);
const modes = (flags.modes ?? 'http1,http2').split(',').map((m) => m.trim());
for (const m of modes)
  if (m !== 'http1' && m !== 'http2') usageError(`--modes takes http1 and/or http2, got ${m}`);
const churn = numberFlag('churn', flags.churn, { fallback: 0, min: 0, integer: true });
const allocators: Allocator[] = (flags.allocators ?? 'glibc')
  .split(',')
  .map(
    (a) =>
      parseAllocator(a.trim()) ?? usageError(`--allocators takes glibc and/or jemalloc, got ${a}`),
  );
const out = flags.out ?? join(REPO, 'bench/results/stream-memory.json');

interface Memory {
  rss: number;
  heapUsed: number;
  external: number;
  streams: number;
  connections: number;
}

/** Spawns `script` with node (GC exposed) and resolves with the first stdout line matching. */
function start(script: string, args: string[], ready: RegExp, env: Record<string, string> = {}) {
  const child = spawn(
    process.execPath,
    ['--expose-gc', join(import.meta.dirname, script), ...args],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, ...env },
    },
  );
  const line = new Promise<RegExpExecArray>((resolve, reject) => {
    let text = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      text += chunk;
      const m = ready.exec(text);
      if (m !== null) resolve(m);
    });
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}: ${text}`)));
  });
  return { child, line };
}

function memoryOf(port: number, ca: string): Promise<Memory> {
  return new Promise((resolve, reject) => {
    https
      .get(`https://127.0.0.1:${port}/bench/memory`, { ca, agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve(JSON.parse(body) as Memory));
      })
      .on('error', reject);
  });
}

/** CPU seconds (user + system) the server used so far. */
function cpuSecondsOf(pid: number | undefined): number {
  return (pid === undefined ? undefined : cpuSeconds(pid)) ?? Number.NaN;
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

const dir = mkdtempSync(join(tmpdir(), 'switchyard-stream-memory-'));
const tls = makeServingTls(dir);
const ca = readFileSync(tls.caFile, 'utf8');
const cases = [];
const round = (x: number): number => Math.round(x * 10) / 10;
const mb = (bytes: number): number => round(bytes / 1024 / 1024);
try {
  for (const allocator of allocators)
    for (const k of perSidecar)
      for (const mode of modes) {
        const server = start(
          'server.ts',
          [
            ...['--cert', tls.certFile, '--key', tls.keyFile],
            ...['--pools', String(pools), '--endpoints', String(endpoints)],
          ],
          /port (\d+)/,
          allocatorEnv(allocator),
        );
        const port = Number((await server.line)[1]);
        await sleep(1000);
        const before = await memoryOf(port, ca);
        const cpuBefore = cpuSecondsOf(server.child.pid);
        const startedMs = performance.now();
        const connect = () =>
          start(
            'clients.ts',
            [
              ...['--mode', mode, '--url', `https://127.0.0.1:${port}`, '--ca', tls.caFile],
              ...['--sidecars', String(sidecars), '--pools-per-sidecar', String(k)],
              ...['--pools', String(pools)],
            ],
            /ready (\d+)/,
          );
        let clients = connect();
        await clients.line;
        const connectedS = (performance.now() - startedMs) / 1000;
        const connectCpu = cpuSecondsOf(server.child.pid) - cpuBefore;
        await sleep(settleMs);
        const settleCpu = cpuSecondsOf(server.child.pid) - cpuBefore - connectCpu;
        const after = await memoryOf(port, ca);
        const row: Record<string, unknown> = {
          allocator,
          mode,
          sidecars,
          poolsPerSidecar: k,
          streams: after.streams,
          connections: after.connections,
          connectSeconds: round(connectedS),
          serverCpuConnectMsPerSidecar: Math.round((connectCpu * 1e5) / sidecars) / 100,
          serverCpuSettlePercent: round((settleCpu / (settleMs / 1000)) * 100),
          rssBeforeMB: mb(before.rss),
          rssAfterMB: mb(after.rss),
          rssPerSidecarKB: round((after.rss - before.rss) / 1024 / sidecars),
          heapPerSidecarKB: round((after.heapUsed - before.heapUsed) / 1024 / sidecars),
        };
        if (churn > 0) {
          const churnCpuBefore = cpuSecondsOf(server.child.pid);
          for (let r = 0; r < churn; r++) {
            // Every connection closes (the client process goes), then all connect again.
            await stop(clients.child);
            clients = connect();
            await clients.line;
          }
          const churnCpu = cpuSecondsOf(server.child.pid) - churnCpuBefore;
          await sleep(settleMs);
          const churned = await memoryOf(port, ca);
          await stop(clients.child);
          await sleep(2000);
          const gone = await memoryOf(port, ca);
          Object.assign(row, {
            churnRounds: churn,
            serverCpuReconnectMsPerSidecar: Math.round((churnCpu * 1e5) / (churn * sidecars)) / 100,
            rssAfterChurnMB: mb(churned.rss),
            rssPerSidecarAfterChurnKB: round((churned.rss - before.rss) / 1024 / sidecars),
            rssAllGoneMB: mb(gone.rss),
          });
        } else await stop(clients.child);
        await stop(server.child);
        cases.push(row);
        process.stdout.write(`${JSON.stringify(row)}\n`);
      }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  `${JSON.stringify(
    {
      bench: 'stream-memory',
      build: gitCommit(),
      date: new Date().toISOString(),
      node: process.version,
      pools,
      endpointsPerPool: endpoints,
      settleSeconds: settleMs / 1000,
      churnRounds: churn,
      jemallocConf: allocators.includes('jemalloc')
        ? allocatorEnv('jemalloc').MALLOC_CONF
        : undefined,
      method:
        "server: the controller's SnapshotServer over TLS, a fresh process per case; RSS after a full GC, before the clients and after every stream has its snapshot and has reported, plus the settle; per sidecar = difference / sidecars. Churn: the client process stops (every connection closes) and a new one connects all sidecars again, churnRounds times; RSS read after the settle, and 2 s after the last clients stopped",
      cases,
    },
    null,
    2,
  )}\n`,
);
process.stdout.write(`wrote ${out}\n`);
