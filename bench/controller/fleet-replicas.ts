/**
 * The fleet bench's controller replicas (one serving certificate for 127.0.0.1, shared, as the
 * chart's Secret is) and the readings taken of them and of the API server: each replica's RSS and
 * CPU, its connected sidecars, and the API server's request counters by verb and resource.
 */
import { allocatorEnv, type Allocator } from '../../harness/allocator.ts';
import { cpuSeconds, memoryMb } from '../../harness/proc.ts';
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import { controllerArgs, type ApiServer } from './setup.ts';
import { LogCounts } from './log-counts.ts';
import { parseMetrics } from './report.ts';

export interface Replica {
  identity: string;
  process: RunningProcess;
  port: number;
  alive: boolean;
  /** Its warnings and errors so far, counted by message. */
  logs: LogCounts;
}

export async function startReplicas(
  count: number,
  server: ApiServer,
  tls: { certFile: string; keyFile: string },
  allocator: Allocator,
  cpuProfDir?: string,
  nodeArgs: readonly string[] = [],
): Promise<Replica[]> {
  const env = allocatorEnv(allocator);
  const start = (i: number): Promise<Replica> => {
    const logs = new LogCounts();
    return startSwitchyard(controllerArgs(server.cluster.kubeconfigPath, tls, `controller-${i}`), {
      timeoutMs: 120_000,
      env,
      onLine: (line) => logs.addLine(line, 40),
      nodeArgs: [
        ...nodeArgs,
        ...(cpuProfDir === undefined
          ? []
          : [
              '--cpu-prof',
              `--cpu-prof-dir=${cpuProfDir}`,
              `--cpu-prof-name=controller-${i}.cpuprofile`,
            ]),
      ],
    }).then((process) => ({
      identity: `controller-${i}`,
      process,
      port: Number(new URL(process.url).port),
      alive: true,
      logs,
    }));
  };
  return Promise.all(Array.from({ length: count }, (_, i) => start(i)));
}

export interface ReplicaReading {
  identity: string;
  rssMb: number | undefined;
  hwmMb: number | undefined;
  cpuSeconds: number | undefined;
  connectedSidecars: number | undefined;
  /**
   * What of the RSS is JavaScript's (V8's heap in use and committed, and memory outside it that
   * JS objects hold: Buffers), from the replica's own process metrics; the rest is native (TLS,
   * HTTP/2 sessions, the allocator's free lists) and the node binary's pages.
   */
  heapUsedMb: number | undefined;
  heapTotalMb: number | undefined;
  externalMb: number | undefined;
}

const PROCESS = 'switchyard_controller_process_nodejs_';
const inMb = (bytes: number | undefined): number | undefined =>
  bytes === undefined ? undefined : Math.round(bytes / 1024 / 102.4) / 10;

export async function readReplicas(replicas: readonly Replica[]): Promise<ReplicaReading[]> {
  return Promise.all(
    replicas
      .filter((r) => r.alive)
      .map(async (r) => {
        let metrics = new Map<string, number>();
        try {
          metrics = parseMetrics(await (await fetch(`${r.process.adminUrl}/metrics`)).text());
        } catch {
          // An unanswered scrape leaves these readings undefined.
        }
        const mem = memoryMb(r.process.pid);
        return {
          identity: r.identity,
          rssMb: mem?.rss,
          hwmMb: mem?.hwm,
          cpuSeconds: cpuSeconds(r.process.pid),
          connectedSidecars: metrics.get('switchyard_controller_connected_sidecars'),
          heapUsedMb: inMb(metrics.get(`${PROCESS}heap_size_used_bytes`)),
          heapTotalMb: inMb(metrics.get(`${PROCESS}heap_size_total_bytes`)),
          externalMb: inMb(metrics.get(`${PROCESS}external_memory_bytes`)),
        };
      }),
  );
}

/** `apiserver_request_total` summed by "VERB resource[/subresource]". */
export async function apiRequestCounts(server: ApiServer): Promise<Map<string, number>> {
  const res = await server.api.request('GET', '/metrics');
  const counts = new Map<string, number>();
  for (const line of res.text.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const labels = Object.fromEntries(
      [...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]),
    );
    const key = `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ''}`;
    counts.set(key, (counts.get(key) ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1)));
  }
  return counts;
}

/** Per minute, the counters' growth between two readings, writes only (and TokenReviews). */
export function ratesPerMinute(
  before: Map<string, number>,
  after: Map<string, number>,
  seconds: number,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, v] of after) {
    const grown = v - (before.get(key) ?? 0);
    if (grown <= 0 || !/^(POST|PUT|PATCH|DELETE|APPLY) /.test(key)) continue;
    out[key] = Math.round((grown / seconds) * 60 * 10) / 10;
  }
  return out;
}
