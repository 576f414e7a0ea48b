/**
 * A subscriber host for `npm run bench:controller-fleet`: one process running many of the
 * sidecar's own controller clients (`startControllerClient`: the stream, the snapshot applier,
 * the reporter, as `switchyard sidecar --controller` wires them), each with its own token file,
 * pool and sidecar id, all through one local round-robin forwarder over the controller replicas
 * (fleet-forwarder.ts: the Service's part). What the routing would do with a snapshot is left
 * out; every endpoint is reported healthy.
 *
 * Usage: node fleet-host.ts <config.json>. Prints the forwarder's URL once listening, then a
 * line per snapshot a client applied (`s <subscriber> <epoch ms> <digest of its endpoint ids>`),
 * and on stdin `arm` a line per stream seen closed afterwards (`d <subscriber> <epoch ms>`), on
 * `stats` one `stats {json}` line (connections, forwarder hand-outs and who ended them, event-loop
 * delay since the last `stats`, log lines counted by message), on `progress` the same as a
 * `progress {json}` line with the delay since the last `progress`, on `counters` one
 * `counters {json}` line: per subscriber index,
 * [snapshots applied (whole or built from an `endpoints` delta), bytes of the `snapshot` and
 * `endpoints` events received]. The bytes are the SSE event as the controller frames it (`event:`,
 * `id:`, `data: <JSON>` as received); TLS, chunked framing, heartbeats and other event types are
 * not counted.
 */
import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay, type ELDHistogram } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import pino from 'pino';
import {
  startControllerClient,
  type ControllerClient,
} from '../../sidecar/config/controller/controller-client.ts';
import { snapshotKey } from './fixture.ts';
import { keyDigest } from './fleet-digest.ts';
import { startForwarder } from './fleet-forwarder.ts';
import { LogCounts } from './log-counts.ts';

export interface HostConfig {
  /** The replicas' stream ports on 127.0.0.1. */
  backends: number[];
  /** Where this host's round-robin starts (host index), so hosts together spread evenly. */
  offset: number;
  caFile: string;
  reportEveryMs: number;
  subscribers: { index: number; namespace: string; pool: string; tokenFile: string }[];
}

const epochMs = (): number => performance.timeOrigin + performance.now();

async function main(): Promise<void> {
  const config = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as HostConfig;
  const forwarder = await startForwarder(config.backends, config.offset);
  // Lines from info up are counted by message (why subscribers reconnect is in them); only errors
  // are written: 10,000 clients' reconnect warnings would cost more than they tell.
  const logCounts = new LogCounts();
  const logger = pino(
    {
      level: 'info',
      hooks: {
        logMethod(args, method, level) {
          const [first, second] = args as unknown[];
          const fields =
            typeof first === 'object' && first !== null
              ? (first as Record<string, unknown>)
              : undefined;
          const msg = fields === undefined ? first : second;
          logCounts.add(level, typeof msg === 'string' ? msg : '(no message)', fields);
          if (level >= 50) method.apply(this, args);
        },
      },
    },
    pino.destination(2),
  );
  // How late this host's timers and I/O run: a host too busy to read its sockets in time makes
  // its clients' watchdogs fire on connections that are fine. One histogram per `stats` (a bench
  // phase), one per `progress` line.
  const loopDelay = (): ELDHistogram => {
    const h = monitorEventLoopDelay({ resolution: 20 });
    h.enable();
    return h;
  };
  const delayOf = (h: ELDHistogram): { p99Ms: number; maxMs: number } => ({
    p99Ms: Math.round(h.percentile(99) / 1e6),
    maxMs: Math.round(h.max / 1e6),
  });
  const phaseDelay = loopDelay();
  const windowDelay = loopDelay();
  let pending: string[] = [];
  const emit = (line: string): void => {
    if (pending.length === 0) setImmediate(flush);
    pending.push(line);
  };
  const flush = (): void => {
    const text = pending.join('\n') + '\n';
    pending = [];
    process.stdout.write(text);
  };
  const clients: ControllerClient[] = [];
  const held = new Map<number, string>();
  let applied = 0;
  let snapshotBytes = 0;
  const counters = new Map<number, [number, number]>();
  for (const s of config.subscribers) {
    let endpoints: { id: string }[] = [];
    clients.push(
      startControllerClient({
        controllerUrl: `https://127.0.0.1:${forwarder.port}`,
        namespace: s.namespace,
        pool: s.pool,
        tokenFile: s.tokenFile,
        caFile: config.caFile,
        sidecarId: `fleet-${s.index}`,
        reportEveryMs: config.reportEveryMs,
        logger,
        // The events as received (full snapshots and, since the client asks for them, endpoints
        // deltas: issue 46), framed as the controller frames them.
        onStreamEvent: (type, id, data) => {
          const bytes = Buffer.byteLength(
            `event: ${type}\n${id === undefined ? '' : `id: ${id}\n`}data: ${data}\n\n`,
          );
          snapshotBytes += bytes;
          const c = counters.get(s.index) ?? [0, 0];
          counters.set(s.index, [c[0], c[1] + bytes]);
        },
        onSnapshot: (snapshot) => {
          applied++;
          const c = counters.get(s.index) ?? [0, 0];
          counters.set(s.index, [c[0] + 1, c[1]]);
          endpoints = snapshot.endpoints;
          const digest = keyDigest(snapshotKey(endpoints));
          const changed = held.get(s.index) !== digest;
          held.set(s.index, digest);
          emit(`s ${s.index} ${epochMs().toFixed(2)} ${digest}`);
          return changed;
        },
        currentEndpoints: () =>
          endpoints.map((e) => ({
            id: e.id,
            breaker: 'closed' as const,
            errorRate: 0,
            rateLimitRate: 0,
            ewmaTtftMs: 0,
            inFlight: 0,
          })),
      }),
    );
  }
  process.stdout.write(`https://127.0.0.1:${forwarder.port}\n`);

  // Drops, watched only after `arm` (the replica-kill measure): polled, since the client tells
  // only whether a stream is open now.
  let watch: NodeJS.Timeout | undefined;
  const input = createInterface({ input: process.stdin });
  input.on('line', (line) => {
    if (line === 'arm') {
      const down = new Set<number>();
      clearInterval(watch);
      watch = setInterval(() => {
        config.subscribers.forEach((s, i) => {
          const open = clients[i]!.connected();
          if (!open && !down.has(s.index)) {
            down.add(s.index);
            emit(`d ${s.index} ${epochMs().toFixed(2)}`);
          } else if (open) down.delete(s.index);
        });
      }, 10);
    } else if (line === 'stats' || line === 'progress') {
      const connected = clients.filter((c) => c.connected()).length;
      const delay = line === 'stats' ? phaseDelay : windowDelay;
      const loopDelayMs = delayOf(delay);
      delay.reset();
      emit(
        `${line} ${JSON.stringify({
          connected,
          applied,
          snapshotBytes,
          handed: forwarder.handed,
          closedFirstBy: forwarder.closedFirstBy,
          loopDelayMs,
          rssMb: process.memoryUsage().rss / 2 ** 20,
          logs: logCounts.toJSON(),
        })}`,
      );
    } else if (line === 'counters') {
      emit(`counters ${JSON.stringify(Object.fromEntries(counters))}`);
    }
  });
  input.on('close', () => void shutdown());
  const shutdown = async (): Promise<void> => {
    clearInterval(watch);
    await Promise.all(clients.map((c) => c.close()));
    forwarder.close();
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown());
}

await main();
