/**
 * Test hosts: network namespaces, each joined to the root namespace by a veth pair, so a test can
 * run servers on "other machines" with their own 10.x address (a pod IP, a node), all inside
 * this machine.
 *
 *   root namespace:  sy-<pid>-<k>   10.77.<n>.1/30
 *   namespace sy-<pid>-<k>:  eth0   10.77.<n>.2/30  (+ lo up); no default route
 *
 * <pid> is the test process's pid (parallel runs do not clash), <k> counts this process's hosts,
 * <n> is a /30 claimed machine-wide under /run/switchyard-test-hosts/<n>. Namespaces and veths
 * are removed by remove(), at exit (also on SIGINT/SIGTERM), and — for runs that were SIGKILLed —
 * at the next run's first createTestHost().
 *
 * Traffic rule: a test sends requests to a 10.x address only after assertTestAddress(ip), which
 * throws unless that address is one this process configured and it is still on its interface.
 * Needs root and `ip netns` (iproute2).
 */
import {
  execFile,
  execFileSync,
  spawn as spawnChild,
  type ChildProcess,
  type SpawnOptions,
} from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { SWITCHYARD_BIN } from '../../harness/processes.ts';
import { onExit } from '../../harness/exit-hooks.ts';
import { isAlive } from '../../harness/proc.ts';

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface HostProcess {
  child: ChildProcess;
  pid: number;
  /** Everything it wrote to stdout and stderr so far. */
  output(): string;
  /** Resolves with the first output line matching `pattern`; rejects if it exits first. */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves with the exit code (or signal) when it ends. */
  exited: Promise<number | string>;
  /** SIGTERM, SIGKILL after `graceMs`; resolves when it is gone. */
  stop(graceMs?: number): Promise<number | string>;
}

export interface TestHost {
  /** Name of the network namespace and of the root-side veth, e.g. 'sy-4242-0'. */
  name: string;
  /** The host's address, inside its namespace (10.77.<n>.2). */
  ip: string;
  /** The root namespace's end of the veth (10.77.<n>.1): what the host sees as its peer. */
  peerIp: string;
  /** Runs `cmd args` inside the namespace to completion. Never throws on a non-zero exit. */
  exec(cmd: string, args?: string[], options?: { timeoutMs?: number }): Promise<ExecResult>;
  /** Starts `cmd args` inside the namespace; it is stopped by remove() and at exit. */
  spawn(cmd: string, args?: string[], options?: SpawnOptions): HostProcess;
  /** Stops its processes, deletes the namespace and the veth pair. Safe to call twice. */
  remove(): Promise<void>;
}

const PREFIX = 'sy-';
const CLAIMS_DIR = existsSync('/run')
  ? '/run/switchyard-test-hosts'
  : join(tmpdir(), 'switchyard-test-hosts');
/** The /30 blocks: 10.77.<n>.0/30 for n in [0, 256). */
const SUBNETS = 256;

interface HostRecord {
  name: string;
  subnet: number;
  ip: string;
  peerIp: string;
  processes: Set<ChildProcess>;
  removed: boolean;
}

/** Hosts of this process, by name. */
const hosts = new Map<string, HostRecord>();
let counter = 0;
let prepared = false;

function ip(args: string[]): string {
  try {
    return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    const e = error as { stderr?: string; message: string };
    throw new Error(`ip ${args.join(' ')} failed: ${(e.stderr ?? e.message).trim()}`, {
      cause: error,
    });
  }
}

function ipQuiet(args: string[]): void {
  try {
    ip(args);
  } catch {
    // already gone
  }
}

/** Throws a clear error unless this machine can make test hosts (root, `ip netns`). */
export function checkTestHostSupport(): void {
  if (process.getuid?.() !== 0) {
    throw new Error('test hosts need root: they create network namespaces and veth pairs');
  }
  try {
    ip(['netns', 'list']);
  } catch (error) {
    throw new Error(
      `test hosts need network namespaces, and \`ip netns list\` fails here (is iproute2 ` +
        `installed and /run/netns writable?): ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/** Processes still inside a namespace (that a dead test run started there). */
function namespacePids(name: string): number[] {
  try {
    return ip(['netns', 'pids', name])
      .split('\n')
      .filter((l) => /^\d+$/.test(l.trim()))
      .map(Number);
  } catch {
    return [];
  }
}

function deleteNamespace(name: string): void {
  for (const pid of namespacePids(name)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  ipQuiet(['link', 'del', name]);
  ipQuiet(['netns', 'del', name]);
}

/** Removes namespaces, veths and subnet claims of test runs whose process is gone. */
export function reapStaleTestHosts(): void {
  const stale = (name: string): boolean => {
    const match = new RegExp(`^${PREFIX}(\\d+)-\\d+$`).exec(name);
    return match !== null && !isAlive(Number(match[1]));
  };
  for (const line of ip(['netns', 'list']).split('\n')) {
    const name = line.split(' ')[0] ?? '';
    if (stale(name)) deleteNamespace(name);
  }
  for (const line of ip(['-o', 'link', 'show']).split('\n')) {
    const name = (/^\d+:\s+([^:@\s]+)/.exec(line)?.[1] ?? '').trim();
    if (stale(name)) ipQuiet(['link', 'del', name]);
  }
  if (existsSync(CLAIMS_DIR)) {
    for (const subnet of readdirSync(CLAIMS_DIR)) {
      const owner = readOwner(subnet);
      if (owner === undefined || !isAlive(owner))
        rmSync(join(CLAIMS_DIR, subnet), { recursive: true, force: true });
    }
  }
}

function readOwner(subnet: string): number | undefined {
  try {
    const owner = Number(readFileSync(join(CLAIMS_DIR, subnet, 'owner'), 'utf8'));
    return Number.isInteger(owner) && owner > 0 ? owner : undefined;
  } catch {
    return undefined;
  }
}

/** Claims a free 10.77.<n>.0/30 machine-wide (mkdir is atomic). */
function claimSubnet(): number {
  mkdirSync(CLAIMS_DIR, { recursive: true });
  const configured = ip(['-o', 'addr', 'show']);
  for (let n = 0; n < SUBNETS; n++) {
    if (configured.includes(` 10.77.${n}.`)) continue;
    try {
      mkdirSync(join(CLAIMS_DIR, String(n)));
    } catch {
      continue;
    }
    writeFileSync(join(CLAIMS_DIR, String(n), 'owner'), String(process.pid));
    return n;
  }
  throw new Error(
    `no free 10.77.<n>.0/30 subnet for a test host (all ${SUBNETS} claimed in ${CLAIMS_DIR})`,
  );
}

function releaseSubnet(n: number): void {
  if (readOwner(String(n)) === process.pid)
    rmSync(join(CLAIMS_DIR, String(n)), { recursive: true, force: true });
}

function removeSync(record: HostRecord): void {
  if (record.removed) return;
  record.removed = true;
  for (const child of record.processes) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  deleteNamespace(record.name);
  releaseSubnet(record.subnet);
  hosts.delete(record.name);
}

function prepare(): void {
  if (prepared) return;
  checkTestHostSupport();
  reapStaleTestHosts();
  onExit(() => {
    for (const record of [...hosts.values()]) removeSync(record);
  });
  prepared = true;
}

/**
 * Throws unless `address` is an address of a test host this process created (its own or its
 * root-side peer address) and is configured on that host's interface right now. Call it before
 * any request to a 10.x address.
 */
export function assertTestAddress(address: string): void {
  const record = [...hosts.values()].find((h) => h.ip === address || h.peerIp === address);
  if (record === undefined || record.removed) {
    throw new Error(
      `${address} is not the address of a test host of this process: refusing to send traffic to it`,
    );
  }
  const shown =
    address === record.ip
      ? ip(['-n', record.name, '-o', 'addr', 'show', 'dev', 'eth0'])
      : ip(['-o', 'addr', 'show', 'dev', record.name]);
  if (!shown.includes(` inet ${address}/30 `)) {
    throw new Error(
      `${address} is not configured on test host ${record.name} any more: refusing to send traffic to it`,
    );
  }
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<ExecResult> {
  return new Promise((resolve) => {
    execFile(
      cmd,
      args,
      { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024, encoding: 'utf8' },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
        resolve({
          code,
          stdout,
          stderr: stderr + (error !== null && typeof error.code !== 'number' ? error.message : ''),
        });
      },
    );
  });
}

function track(child: ChildProcess, record: HostRecord): HostProcess {
  record.processes.add(child);
  let log = '';
  const lines: string[] = [];
  const waiters = new Set<(line: string) => void>();
  const onLine = (line: string): void => {
    log += line + '\n';
    if (log.length > 200_000) log = log.slice(-100_000);
    lines.push(line);
    if (lines.length > 1_000) lines.shift();
    for (const waiter of waiters) waiter(line);
  };
  if (child.stdout !== null) createInterface({ input: child.stdout }).on('line', onLine);
  if (child.stderr !== null) createInterface({ input: child.stderr }).on('line', onLine);
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      record.processes.delete(child);
      resolve(code ?? signal ?? 'unknown');
    });
    child.once('error', (error) => {
      record.processes.delete(child);
      resolve(`failed to start: ${error.message}`);
    });
  });
  const running = (): boolean => child.exitCode === null && child.signalCode === null;
  return {
    child,
    pid: child.pid ?? -1,
    output: () => log,
    exited,
    waitForLine(pattern, timeoutMs = 15_000) {
      const seen = lines.find((l) => pattern.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const done = (): void => {
          clearTimeout(timer);
          waiters.delete(waiter);
        };
        const waiter = (line: string): void => {
          if (!pattern.test(line)) return;
          done();
          resolve(line);
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(
              `no line matching ${pattern} within ${timeoutMs} ms in ${record.name}:\n${log}`,
            ),
          );
        }, timeoutMs);
        waiters.add(waiter);
        void exited.then((code) => {
          if (!waiters.has(waiter)) return;
          done();
          reject(
            new Error(
              `process in ${record.name} exited (${code}) before printing ${pattern}:\n${log}`,
            ),
          );
        });
      });
    },
    async stop(graceMs = 5_000) {
      if (!running()) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => running() && child.kill('SIGKILL'), graceMs);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
}

/**
 * Creates a test host: a network namespace `sy-<pid>-<k>` with lo and eth0 up, eth0 at
 * 10.77.<n>.2/30, joined by a veth pair to the root namespace's 10.77.<n>.1. `label` only
 * appears in error messages.
 */
export function createTestHost(label = 'host'): Promise<TestHost> {
  prepare();
  const name = `${PREFIX}${process.pid}-${counter++}`;
  if (name.length > 15) throw new Error(`interface name ${name} is longer than 15 characters`);
  const subnet = claimSubnet();
  const record: HostRecord = {
    name,
    subnet,
    ip: `10.77.${subnet}.2`,
    peerIp: `10.77.${subnet}.1`,
    processes: new Set(),
    removed: false,
  };
  hosts.set(name, record);
  try {
    ip(['netns', 'add', name]);
    ip(['link', 'add', name, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', name]);
    ip(['addr', 'add', `${record.peerIp}/30`, 'dev', name]);
    ip(['link', 'set', name, 'up']);
    ip(['-n', name, 'link', 'set', 'lo', 'up']);
    ip(['-n', name, 'addr', 'add', `${record.ip}/30`, 'dev', 'eth0']);
    ip(['-n', name, 'link', 'set', 'eth0', 'up']);
  } catch (error) {
    removeSync(record);
    throw new Error(`could not create test host ${label}: ${(error as Error).message}`, {
      cause: error,
    });
  }

  const host: TestHost = {
    name,
    ip: record.ip,
    peerIp: record.peerIp,
    exec: (cmd, args = [], options = {}) =>
      run('ip', ['netns', 'exec', name, cmd, ...args], options.timeoutMs ?? 30_000),
    spawn: (cmd, args = [], options = {}) => {
      if (record.removed) throw new Error(`test host ${name} (${label}) was removed`);
      const child = spawnChild('ip', ['netns', 'exec', name, cmd, ...args], {
        stdio: ['ignore', 'pipe', 'pipe'],
        ...options,
      });
      return track(child, record);
    },
    async remove() {
      if (record.removed) return;
      await Promise.all(
        [...record.processes].map(
          (child) =>
            new Promise<void>((resolve) => {
              if (child.exitCode !== null || child.signalCode !== null) return resolve();
              const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
              child.once('exit', () => {
                clearTimeout(timer);
                resolve();
              });
              child.kill('SIGTERM');
            }),
        ),
      );
      removeSync(record);
    },
  };
  return Promise.resolve(host);
}

/**
 * Starts `switchyard <args>` (e.g. ['sim', '--port', '8000']) inside `host`, with `--host
 * <host.ip>` added when args have no --host, and waits for the URL line it prints when ready.
 */
export async function startSwitchyardIn(
  host: TestHost,
  args: string[],
  timeoutMs = 15_000,
): Promise<HostProcess & { url: string }> {
  const withHost = args.includes('--host') ? args : [...args, '--host', host.ip];
  const proc = host.spawn(process.execPath, [SWITCHYARD_BIN, ...withHost]);
  try {
    const url = await proc.waitForLine(/^https?:\/\/\S+$/, timeoutMs);
    return Object.assign(proc, { url: url.trim() });
  } catch (error) {
    await proc.stop(1_000);
    throw error;
  }
}
