/**
 * What a process holds and uses, read from /proc: open file descriptors, its TCP connections
 * (matched by socket inode against the connection table of its network namespace), its memory
 * and CPU time, and the whole machine's CPU time. The reliability tests use it to prove that
 * faults and aborts leave nothing behind; the benchmarks to charge CPU and memory to each process.
 *
 * Synchronous on purpose: the benchmarks' samplers read it from timers, where an await would let
 * the readings of one sample drift apart.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

export interface TcpConnection {
  localPort: number;
  remotePort: number;
  /** The kernel's state name: ESTABLISHED, LISTEN, TIME_WAIT, CLOSE_WAIT, ... */
  state: string;
  /** The socket's inode: the same connection in two readings. */
  inode: string;
  /** Bytes sent and not yet acknowledged by the peer (ESTABLISHED), as the kernel counts them. */
  txQueue: number;
  /** Bytes received and not yet read by the process. */
  rxQueue: number;
}

const TCP_STATES: Record<string, string> = {
  '01': 'ESTABLISHED',
  '02': 'SYN_SENT',
  '03': 'SYN_RECV',
  '04': 'FIN_WAIT1',
  '05': 'FIN_WAIT2',
  '06': 'TIME_WAIT',
  '07': 'CLOSE',
  '08': 'CLOSE_WAIT',
  '09': 'LAST_ACK',
  '0A': 'LISTEN',
  '0B': 'CLOSING',
};

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * Targets of the process's file descriptors (`socket:[123]`, `/dev/null`, `anon_inode:[eventfd]`...).
 * Throws when the process is gone.
 */
export function fdTargets(pid: number): string[] {
  const targets: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      targets.push(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed meanwhile
    }
  }
  return targets;
}

/** TCP connections (IPv4 and IPv6) whose socket the process holds. */
export function tcpConnections(pid: number): TcpConnection[] {
  const inodes = new Set<string>();
  for (const target of fdTargets(pid)) {
    const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
    if (inode !== undefined) inodes.add(inode);
  }
  const found: TcpConnection[] = [];
  for (const table of ['tcp', 'tcp6']) {
    const text = readText(`/proc/${pid}/net/${table}`) ?? '';
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10 || !inodes.has(cols[9]!)) continue;
      const port = (address: string): number => parseInt(address.split(':')[1] ?? '0', 16);
      const [tx, rx] = (cols[4] ?? '0:0').split(':');
      found.push({
        localPort: port(cols[1]!),
        remotePort: port(cols[2]!),
        state: TCP_STATES[cols[3]!] ?? cols[3]!,
        inode: cols[9]!,
        txQueue: parseInt(tx ?? '0', 16),
        rxQueue: parseInt(rx ?? '0', 16),
      });
    }
  }
  return found;
}

/** Established connections of `pid` to (or from) `port`. */
export function establishedWith(pid: number, port: number): number {
  return tcpConnections(pid).filter(
    (c) => c.state === 'ESTABLISHED' && (c.remotePort === port || c.localPort === port),
  ).length;
}

/** What the process holds, for a before/after comparison. */
export interface Holdings {
  fds: number;
  sockets: number;
  established: number;
}

export function holdings(pid: number): Holdings {
  const targets = fdTargets(pid);
  const connections = tcpConnections(pid);
  return {
    fds: targets.length,
    sockets: targets.filter((t) => t.startsWith('socket:')).length,
    established: connections.filter((c) => c.state === 'ESTABLISHED').length,
  };
}

/** A `<field>: <n> kB` line of /proc/<pid>/status in MiB, or undefined. */
function statusMb(status: string, field: string): number | undefined {
  const kb = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status)?.[1];
  return kb === undefined ? undefined : Number(kb) / 1024;
}

/** Resident set size (VmRSS) in MiB, or undefined when it cannot be read. */
export function rssMb(pid: number): number | undefined {
  const status = readText(`/proc/${pid}/status`);
  return status === undefined ? undefined : statusMb(status, 'VmRSS');
}

/** VmRSS and VmHWM (peak RSS over the process's life) in MiB. */
export function memoryMb(pid: number): { rss: number; hwm: number } | undefined {
  const status = readText(`/proc/${pid}/status`);
  if (status === undefined) return undefined;
  const rss = statusMb(status, 'VmRSS');
  const hwm = statusMb(status, 'VmHWM');
  return rss === undefined || hwm === undefined ? undefined : { rss, hwm };
}

let clockTicks: number | undefined;
/** USER_HZ: the unit of CPU times in /proc. */
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    const out = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    const n = Number(out.stdout?.trim());
    clockTicks = Number.isFinite(n) && n > 0 ? n : 100;
  }
  return clockTicks;
}

/** utime + stime of a process (all its threads) so far, in CPU seconds, or undefined. */
export function cpuSeconds(pid: number | 'self'): number | undefined {
  const stat = readText(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / ticksPerSecond();
}

/**
 * CPU seconds the whole machine spent so far (all cores, from /proc/stat): `tasks` is time in
 * processes (user, nice, system, steal), `irq` the kernel's interrupt and softirq work, which
 * on loopback is much of the TCP stack and is charged to no process.
 */
export function machineCpuSeconds(): { tasks: number; irq: number } | undefined {
  const line = readText('/proc/stat')?.split('\n', 1)[0];
  if (line === undefined) return undefined;
  const [, user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).map(Number);
  const ticks = ticksPerSecond();
  return {
    tasks: ((user ?? 0) + (nice ?? 0) + (system ?? 0) + (steal ?? 0)) / ticks,
    irq: ((irq ?? 0) + (softirq ?? 0)) / ticks,
  };
}

/** Whether a process with this PID exists (one we may not signal, EPERM, exists too). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
