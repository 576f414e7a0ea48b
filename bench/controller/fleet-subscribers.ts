/**
 * The fleet bench's subscribers, seen from the bench process: subscriber hosts (fleet-host.ts,
 * many sidecar controller clients per process) and full sidecar processes (the compiled build,
 * `dist/bin/switchyard.js sidecar --controller …`). Both report every snapshot applied with a
 * wall-clock time and a digest of its endpoint set; this module keeps what each subscriber holds
 * and lets a measure wait for a set of subscribers to hold a given digest.
 */
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { trackChild, type TrackedChild } from '../../harness/child-processes.ts';
import { controllerSidecarArgs } from '../../harness/processes.ts';
import { REPO } from '../common/repo.ts';
import { snapshotKey, type PoolFixture } from './fixture.ts';
import { keyDigest } from './fleet-digest.ts';
import type { HostConfig } from './fleet-host.ts';

export const epochMs = (): number => performance.timeOrigin + performance.now();

export interface SubscriberState {
  index: number;
  pool: PoolFixture;
  kind: 'client' | 'sidecar';
  digest: string | undefined;
  firstAt: number | undefined;
  /** Every snapshot applied: [epoch ms, digest]. */
  snapshots: number;
  lastAt: number | undefined;
  /** Set by the kill measure: when its stream was seen closed. */
  droppedAt: number | undefined;
  /** First snapshot after `since` (the kill measure). */
  afterSince: number | undefined;
}

interface Waiter {
  need: Set<number>;
  digest: (s: SubscriberState) => string | undefined;
  arrivals: Map<number, number>;
  resolve: () => void;
}

export interface HostStats {
  connected: number;
  applied: number;
  snapshotBytes: number;
  /** Connections its forwarder handed each replica, and which side ended those that ended. */
  handed: number[];
  closedFirstBy: { replica: number; subscriber: number };
  loopDelayMs: { p99Ms: number; maxMs: number };
  rssMb: number;
  /** Its clients' log lines since it started, by level, message and reason (log-counts.ts). */
  logs?: Record<string, number>;
}

interface Child {
  tracked: TrackedChild;
  pid: number;
  stdin?: NodeJS.WritableStream | undefined;
}

export class Fleet {
  readonly subscribers: SubscriberState[] = [];
  private readonly hosts: Child[] = [];
  private readonly sidecars: Child[] = [];
  private readonly waiters = new Set<Waiter>();
  since: number | undefined;
  /** Each host's forwarder port, in the order they came up. */
  readonly forwarderPorts: number[] = [];
  private statsWaiters: ((s: unknown) => void)[] = [];
  private progressWaiters: ((s: unknown) => void)[] = [];
  private countersWaiters: ((s: unknown) => void)[] = [];
  /**
   * Rejects when a subscriber host exits before `stopAll()`, with its output: its subscribers are
   * gone, so the run is void and must say so rather than wait out the sync timeout.
   */
  readonly lost: Promise<never>;
  private lose!: (err: Error) => void;
  private stopping = false;
  /** Extra node flags of the subscriber hosts (`--cpu-prof`: their profiles too). */
  hostNodeArgs: string[] = [];

  constructor(pools: { of: (i: number) => PoolFixture }, clients: number, sidecars: number) {
    this.lost = new Promise<never>((_, reject) => (this.lose = reject));
    this.lost.catch(() => undefined); // raced where it matters; never unhandled
    for (let i = 0; i < clients + sidecars; i++)
      this.subscribers.push({
        index: i,
        pool: pools.of(i),
        kind: i < clients ? 'client' : 'sidecar',
        digest: undefined,
        firstAt: undefined,
        snapshots: 0,
        lastAt: undefined,
        droppedAt: undefined,
        afterSince: undefined,
      });
  }

  get pids(): { hosts: number[]; sidecars: number[] } {
    return { hosts: this.hosts.map((h) => h.pid), sidecars: this.sidecars.map((s) => s.pid) };
  }

  private applied(index: number, at: number, digest: string): void {
    const s = this.subscribers[index]!;
    s.digest = digest;
    s.firstAt ??= at;
    s.lastAt = at;
    s.snapshots++;
    if (this.since !== undefined && at >= this.since) s.afterSince ??= at;
    for (const w of this.waiters) {
      if (!w.need.has(index) || w.arrivals.has(index) || w.digest(s) !== digest) continue;
      w.arrivals.set(index, at);
      if (w.arrivals.size === w.need.size) w.resolve();
    }
  }

  /** Resolves once every subscriber in `need` applied a snapshot with the digest `want` gives. */
  expect(
    need: readonly number[],
    want: (s: SubscriberState) => string | undefined,
  ): { arrivals: Map<number, number>; done: Promise<void>; forget: () => void } {
    let resolve!: () => void;
    const done = new Promise<void>((r) => (resolve = r));
    const w: Waiter = { need: new Set(need), digest: want, arrivals: new Map(), resolve };
    this.waiters.add(w);
    if (w.need.size === 0) resolve();
    return { arrivals: w.arrivals, done, forget: () => this.waiters.delete(w) };
  }

  /** `hosts` subscriber hosts sharing the clients round-robin, each with its own forwarder. */
  async startHosts(
    hosts: number,
    backends: number[],
    dir: string,
    caFile: string,
    reportEveryMs: number,
    tokenFileOf: (i: number) => string,
  ): Promise<void> {
    const clients = this.subscribers.filter((s) => s.kind === 'client');
    const starts: Promise<void>[] = [];
    for (let h = 0; h < Math.min(hosts, clients.length); h++) {
      const config: HostConfig = {
        backends,
        offset: h,
        caFile,
        reportEveryMs,
        subscribers: clients
          .filter((s) => s.index % hosts === h)
          .map((s) => ({
            index: s.index,
            namespace: s.pool.namespace,
            pool: s.pool.name,
            tokenFile: tokenFileOf(s.index),
          })),
      };
      const file = join(dir, `host-${h}.json`);
      writeFileSync(file, JSON.stringify(config));
      starts.push(this.spawnHost(file));
    }
    await Promise.all(starts);
  }

  private spawnHost(configFile: string): Promise<void> {
    const child = spawn(
      process.execPath,
      [
        '--max-semi-space-size=4',
        ...this.hostNodeArgs,
        join(REPO, 'bench/controller/fleet-host.ts'),
        configFile,
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const tracked = trackChild(child);
    this.hosts.push({ tracked, pid: child.pid!, stdin: child.stdin });
    return new Promise((resolve, reject) => {
      const lines = createInterface({ input: child.stdout });
      lines.on('line', (line) => {
        if (line.startsWith('https://')) {
          this.forwarderPorts.push(Number(new URL(line).port));
          resolve();
        } else if (line.startsWith('s ')) {
          const [, i, at, digest] = line.split(' ');
          this.applied(Number(i), Number(at), digest!);
        } else if (line.startsWith('d ')) {
          const [, i, at] = line.split(' ');
          this.subscribers[Number(i)]!.droppedAt ??= Number(at);
        } else if (line.startsWith('stats '))
          this.statsWaiters.shift()?.(JSON.parse(line.slice(6)));
        else if (line.startsWith('progress '))
          this.progressWaiters.shift()?.(JSON.parse(line.slice(9)));
        else if (line.startsWith('counters '))
          this.countersWaiters.shift()?.(JSON.parse(line.slice(9)));
      });
      void tracked.exited.then((code) => {
        const err = new Error(`subscriber host exited (${code}):\n${tracked.output()}`);
        reject(err);
        if (!this.stopping) this.lose(err);
      });
    });
  }

  /**
   * Every host's `stats` line: its event loop's delay since the last one (a bench phase) and its
   * log lines counted by message since it started (fleet-host.ts).
   */
  hostStats(): Promise<HostStats[]> {
    return this.askHosts('stats', this.statsWaiters);
  }

  /** The same, with the loop delay since the last progress reading (the 30 s progress line). */
  hostProgress(): Promise<HostStats[]> {
    return this.askHosts('progress', this.progressWaiters);
  }

  private async askHosts(command: string, waiters: ((s: unknown) => void)[]): Promise<HostStats[]> {
    const replies = this.hosts.map(
      (h) =>
        new Promise<unknown>((r) => {
          waiters.push(r);
          h.stdin?.write(`${command}\n`);
        }),
    );
    // Replies come in any order; each is a whole host's, so only the set matters.
    return (await Promise.all(replies)) as HostStats[];
  }

  /** Per subscriber, [snapshots applied, bytes of their events] so far (fleet-host.ts). */
  async hostCounters(): Promise<Map<number, [number, number]>> {
    const replies = this.hosts.map(
      (h) =>
        new Promise<unknown>((r) => {
          this.countersWaiters.push(r);
          h.stdin?.write('counters\n');
        }),
    );
    const out = new Map<number, [number, number]>();
    for (const reply of (await Promise.all(replies)) as Record<string, [number, number]>[])
      for (const [i, c] of Object.entries(reply)) out.set(Number(i), c);
    return out;
  }

  /** Hosts start reporting streams seen closed; snapshots from now on count as `afterSince`. */
  arm(): void {
    this.since = epochMs();
    for (const s of this.subscribers) {
      s.droppedAt = undefined;
      s.afterSince = undefined;
    }
    for (const h of this.hosts) h.stdin?.write('arm\n');
  }

  /**
   * Full sidecar processes of the compiled build (dist/), each on its own token and pool, through
   * `forwarderUrl`. Their `snapshot applied` log lines (pino time, ms) are the arrivals.
   */
  async startSidecars(
    forwarderUrl: string,
    dir: string,
    caFile: string,
    reportEvery: string,
    tokenFileOf: (i: number) => string,
    concurrency = 8,
  ): Promise<void> {
    const bin = join(REPO, 'dist/bin/switchyard.js');
    if (!existsSync(bin))
      throw new Error(`--sidecars needs the compiled build: run npm run build (${bin} is missing)`);
    const todo = this.subscribers.filter((s) => s.kind === 'sidecar');
    const one = (s: SubscriberState): Promise<void> => {
      const args = controllerSidecarArgs({
        controllerUrl: forwarderUrl,
        pool: s.pool.name,
        namespace: s.pool.namespace,
        tokenFile: tokenFileOf(s.index),
        caFile,
        sidecarId: `fleet-${s.index}`,
        reportEvery,
      });
      void dir;
      const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      const tracked = trackChild(child);
      this.sidecars.push({ tracked, pid: child.pid! });
      return new Promise((resolve, reject) => {
        const lines = createInterface({ input: child.stdout });
        lines.on('line', (line) => {
          if (!line.includes('snapshot applied') && !line.includes('sidecar listening')) return;
          const entry = JSON.parse(line) as { msg: string; time: number; endpoints?: string[] };
          if (entry.msg === 'sidecar listening') resolve();
          else if (entry.msg === 'snapshot applied' && entry.endpoints !== undefined)
            this.applied(
              s.index,
              entry.time,
              keyDigest(snapshotKey(entry.endpoints.map((id) => ({ id })))),
            );
        });
        void tracked.exited.then((code) =>
          reject(new Error(`sidecar exited (${code}):\n${tracked.output()}`)),
        );
      });
    };
    for (let i = 0; i < todo.length; i += concurrency)
      await Promise.all(todo.slice(i, i + concurrency).map(one));
  }

  async stopAll(): Promise<void> {
    this.stopping = true;
    await Promise.all(
      [...this.hosts, ...this.sidecars].map((c) => c.tracked.stop(5_000).catch(() => undefined)),
    );
  }
}
