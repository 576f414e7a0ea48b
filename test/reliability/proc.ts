/**
 * What a process holds, read from /proc: open file descriptors, its TCP connections (matched by
 * socket inode against the connection table of its network namespace) and its resident memory.
 * Used to prove that faults and aborts leave nothing behind.
 */
import { readFile, readdir, readlink } from 'node:fs/promises';

export interface TcpConnection {
  localPort: number;
  remotePort: number;
  /** The kernel's state name: ESTABLISHED, LISTEN, TIME_WAIT, CLOSE_WAIT, ... */
  state: string;
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

/** Targets of the process's file descriptors (`socket:[123]`, `/dev/null`, `anon_inode:[eventfd]`...). */
export async function fdTargets(pid: number): Promise<string[]> {
  const fds = await readdir(`/proc/${pid}/fd`);
  const targets = await Promise.all(
    fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => undefined)),
  );
  return targets.filter((t): t is string => t !== undefined);
}

/** TCP connections (IPv4 and IPv6) whose socket the process holds. */
export async function tcpConnections(pid: number): Promise<TcpConnection[]> {
  const inodes = new Set<string>();
  for (const target of await fdTargets(pid)) {
    const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
    if (inode !== undefined) inodes.add(inode);
  }
  const found: TcpConnection[] = [];
  for (const table of ['tcp', 'tcp6']) {
    const text = await readFile(`/proc/${pid}/net/${table}`, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10 || !inodes.has(cols[9]!)) continue;
      const port = (address: string): number => parseInt(address.split(':')[1] ?? '0', 16);
      found.push({
        localPort: port(cols[1]!),
        remotePort: port(cols[2]!),
        state: TCP_STATES[cols[3]!] ?? cols[3]!,
      });
    }
  }
  return found;
}

/** Established connections of `pid` to (or from) `port`. */
export async function establishedWith(pid: number, port: number): Promise<number> {
  return (await tcpConnections(pid)).filter(
    (c) => c.state === 'ESTABLISHED' && (c.remotePort === port || c.localPort === port),
  ).length;
}

/** Resident set size in MiB (VmRSS). */
export async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? NaN);
  return kb / 1024;
}

/** What the process holds, for a before/after comparison. */
export interface Holdings {
  fds: number;
  sockets: number;
  established: number;
}

export async function holdings(pid: number): Promise<Holdings> {
  const targets = await fdTargets(pid);
  const connections = await tcpConnections(pid);
  return {
    fds: targets.length,
    sockets: targets.filter((t) => t.startsWith('socket:')).length,
    established: connections.filter((c) => c.state === 'ESTABLISHED').length,
  };
}
