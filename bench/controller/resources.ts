/**
 * /proc readings for `npm run bench:controller`: RSS and CPU time of the controller, of
 * kube-apiserver and etcd (children of the bench process, found by their parent PID), of the
 * bench process itself, and of the whole machine. A sampler keeps a time series of all of them
 * so each phase of the bench can report CPU shares and RSS over its own window.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { cpuSeconds, machineCpuSeconds, memoryMb, tcpConnections } from '../../harness/proc.ts';

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** RssAnon / RssFile / RssShmem of a process in MiB (what VmRSS is made of). */
export function rssParts(pid: number): { anon: number; file: number; shmem: number } | undefined {
  const status = readText(`/proc/${pid}/status`);
  if (status === undefined) return undefined;
  const kb = (field: string): number =>
    Number(new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status)?.[1] ?? NaN) / 1024;
  return { anon: kb('RssAnon'), file: kb('RssFile'), shmem: kb('RssShmem') };
}

export function loadAverage(): string {
  return (readText('/proc/loadavg') ?? '').split(' ').slice(0, 3).join(' ');
}

/** Child processes of this process whose command name (comm) is one of `names`, by name. */
export function childrenByName(names: readonly string[]): Map<string, number> {
  const found = new Map<string, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readText(`/proc/${entry}/stat`);
    if (stat === undefined) continue;
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === process.pid && names.includes(comm)) found.set(comm, Number(entry));
  }
  return found;
}

export interface Sample {
  /** performance.now() of the bench process. */
  atMs: number;
  controllerRssMb: number | undefined;
  controllerHwmMb: number | undefined;
  /** Cumulative CPU seconds. */
  cpu: {
    controller: number | undefined;
    apiServer: number | undefined;
    etcd: number | undefined;
    bench: number | undefined;
    machineTasks: number | undefined;
    machineIrq: number | undefined;
  };
}

/** CPU over a window, in % of one core (the machine has `cores` × 100 %). */
export interface CpuShare {
  controller: number;
  apiServer: number;
  etcd: number;
  bench: number;
  /** Processes other than these four (other work on the machine). */
  other: number;
  /** Interrupt and softirq time (loopback TCP), charged to no process. */
  irq: number;
  /** Controller CPU seconds used in the window. */
  controllerSeconds: number;
}

export interface WindowStats {
  seconds: number;
  cpu: CpuShare | undefined;
  rssMb: { min: number; mean: number; max: number; last: number } | undefined;
}

/** Samples every `intervalMs` until stopped; `window(from, to)` summarises a stretch of time. */
export class Sampler {
  readonly samples: Sample[] = [];
  private readonly timer: NodeJS.Timeout;
  controllerPid: number | undefined;
  readonly apiServerPid: number | undefined;
  readonly etcdPid: number | undefined;

  constructor(pids: { apiServer: number | undefined; etcd: number | undefined }, intervalMs = 200) {
    this.apiServerPid = pids.apiServer;
    this.etcdPid = pids.etcd;
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
    this.sample();
  }

  sample(): Sample {
    const pid = this.controllerPid;
    const memory = pid === undefined ? undefined : memoryMb(pid);
    const machine = machineCpuSeconds();
    const s: Sample = {
      atMs: performance.now(),
      controllerRssMb: memory?.rss,
      controllerHwmMb: memory?.hwm,
      cpu: {
        controller: pid === undefined ? undefined : cpuSeconds(pid),
        apiServer: this.apiServerPid === undefined ? undefined : cpuSeconds(this.apiServerPid),
        etcd: this.etcdPid === undefined ? undefined : cpuSeconds(this.etcdPid),
        bench: cpuSeconds('self'),
        machineTasks: machine?.tasks,
        machineIrq: machine?.irq,
      },
    };
    this.samples.push(s);
    return s;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * One point per `stepMs` from `fromMs`: seconds since `fromMs`, controller RSS and controller
   * CPU over the step (% of one core). For plotting the run.
   */
  timeline(
    fromMs: number,
    stepMs = 1000,
  ): { t: number; rssMb: number | null; controllerCpuPct: number | null }[] {
    const out: { t: number; rssMb: number | null; controllerCpuPct: number | null }[] = [];
    let prev: Sample | undefined;
    for (const s of this.samples) {
      if (s.atMs < fromMs) continue;
      if (prev !== undefined && s.atMs - prev.atMs < stepMs) continue;
      const cpu =
        prev === undefined || prev.cpu.controller === undefined || s.cpu.controller === undefined
          ? null
          : Math.round(
              ((s.cpu.controller - prev.cpu.controller) / ((s.atMs - prev.atMs) / 1000)) * 1000,
            ) / 10;
      out.push({
        t: Math.round((s.atMs - fromMs) / 100) / 10,
        rssMb: s.controllerRssMb === undefined ? null : Math.round(s.controllerRssMb * 10) / 10,
        controllerCpuPct: cpu,
      });
      prev = s;
    }
    return out;
  }

  /** CPU shares and controller RSS between two bench times (a fresh sample is taken at `toMs`). */
  window(fromMs: number, toMs: number): WindowStats {
    const inside = this.samples.filter((s) => s.atMs >= fromMs && s.atMs <= toMs);
    const first = inside[0];
    const last = inside.at(-1);
    const seconds = first !== undefined && last !== undefined ? (last.atMs - first.atMs) / 1000 : 0;
    let cpu: CpuShare | undefined;
    if (first !== undefined && last !== undefined && seconds > 0) {
      const d = (k: keyof Sample['cpu']): number => {
        // A controller not spawned yet has used no CPU.
        const a = first.cpu[k] ?? (k === 'controller' ? 0 : undefined);
        const b = last.cpu[k];
        return a === undefined || b === undefined ? 0 : b - a;
      };
      const pct = (v: number): number => Math.round((v / seconds) * 1000) / 10;
      const ours = d('controller') + d('apiServer') + d('etcd') + d('bench');
      cpu = {
        controller: pct(d('controller')),
        apiServer: pct(d('apiServer')),
        etcd: pct(d('etcd')),
        bench: pct(d('bench')),
        other: pct(Math.max(0, d('machineTasks') - ours)),
        irq: pct(d('machineIrq')),
        controllerSeconds: Math.round(d('controller') * 1000) / 1000,
      };
    }
    const rss = inside.flatMap((s) => (s.controllerRssMb === undefined ? [] : [s.controllerRssMb]));
    const round1 = (v: number): number => Math.round(v * 10) / 10;
    return {
      seconds: Math.round(seconds * 100) / 100,
      cpu,
      rssMb:
        rss.length === 0
          ? undefined
          : {
              min: round1(Math.min(...rss)),
              mean: round1(rss.reduce((a, b) => a + b, 0) / rss.length),
              max: round1(Math.max(...rss)),
              last: round1(rss.at(-1)!),
            },
    };
  }
}

/**
 * RSS of fresh node processes that only load code: bare node, node with one TypeScript module
 * (type stripping), @kubernetes/client-node alone, and the controller's modules (what the
 * controller holds before it does anything). Each is measured in its own process.
 */
export function moduleBaselines(repo: string): Record<string, number | null> {
  const measure = (code: string): number | null => {
    const out = spawnSync(process.execPath, ['--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 30_000,
    });
    const mb = Number(out.stdout.trim());
    return out.status === 0 && Number.isFinite(mb) ? Math.round(mb * 10) / 10 : null;
  };
  const rss = 'process.stdout.write(String(process.memoryUsage().rss / 2 ** 20))';
  const load = (what: string): string => `await import(${JSON.stringify(what)}); ${rss}`;
  return {
    'node, nothing loaded': measure(rss),
    'node + one TypeScript module (type stripping)': measure(load(`${repo}/crds/path.ts`)),
    'node + @kubernetes/client-node': measure(load('@kubernetes/client-node')),
    'node + controller/controller.ts and its imports': measure(
      load(`${repo}/controller/controller.ts`),
    ),
  };
}

/**
 * TCP connections a process holds to one remote port (the API server), by socket inode.
 * Sampled over a phase, it tells how many connections the process opened and held at once.
 */
export class ConnectionProbe {
  readonly seen = new Set<string>();
  maxOpen = 0;
  private readonly pid: number;
  private readonly port: number;
  private timer: NodeJS.Timeout | undefined;

  constructor(pid: number, port: number) {
    this.pid = pid;
    this.port = port;
  }

  sample(): number {
    let open = 0;
    try {
      for (const c of tcpConnections(this.pid)) {
        if (c.remotePort !== this.port) continue;
        open++;
        this.seen.add(c.inode);
      }
    } catch {
      return 0; // the process is gone
    }
    this.maxOpen = Math.max(this.maxOpen, open);
    return open;
  }

  start(intervalMs: number): void {
    this.stop();
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}
