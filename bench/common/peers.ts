/**
 * The benches' peers: node scripts and servers (HAProxy, nginx, Caddy, LiteLLM...) started as
 * child processes, found on the machine, and stopped by their PID (harness/child-processes.ts);
 * nothing system-wide is touched. A missing peer is skipped by the bench, never installed.
 */
import { spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { trackChild } from '../../harness/child-processes.ts';

export interface Child {
  name: string;
  pid: number;
  /** Base URL, without `/v1`. */
  url: string;
  output(): string;
  exited: Promise<number | string>;
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<number | string>;
}

const tempDirs: string[] = [];
let hooked = false;

/** A fresh directory under the system temp dir, removed when this process exits. */
export function tempDir(name: string): string {
  if (!hooked) {
    hooked = true;
    process.once('exit', () => {
      for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
    });
  }
  const dir = mkdtempSync(join(tmpdir(), `switchyard-bench-${name}-`));
  tempDirs.push(dir);
  return dir;
}

/** Runs `node [nodeArgs] <script> [args]` (`script` a path) and waits for the URL line it prints. */
export function startNodeScript(
  name: string,
  script: string,
  args: string[],
  options: { nodeArgs?: string[]; timeoutMs?: number } = {},
): Promise<Child> {
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const t = trackChild(child);
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      void t.stop(0);
      reject(
        new Error(`${name} did not start within ${options.timeoutMs ?? 10_000} ms:\n${t.output()}`),
      );
    }, options.timeoutMs ?? 10_000);
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (done || !/^https?:\/\/\S+$/.test(line.trim())) return;
      done = true;
      clearTimeout(timer);
      resolve({ name, pid: child.pid!, url: line.trim(), ...t });
    });
    void t.exited.then((code) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before it was ready:\n${t.output()}`));
    });
  });
}

/** A free loopback port (for peers that cannot announce a port they picked themselves). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Spawns `binary args` (a server that cannot announce its port) and waits until `port` accepts
 * connections; its stderr is kept for the error message when it does not.
 */
export async function spawnListening(
  name: string,
  binary: string,
  args: string[],
  port: number,
  options: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<Child> {
  const child = spawn(binary, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  child.stdout?.resume();
  const t = trackChild(child);
  try {
    await waitForPort(
      port,
      options.timeoutMs ?? 10_000,
      () => child.exitCode === null && child.signalCode === null,
    );
  } catch (err) {
    await t.stop(0);
    throw new Error(`${name} did not start: ${(err as Error).message}\n${t.output()}`, {
      cause: err,
    });
  }
  return { name, pid: child.pid!, url: `http://127.0.0.1:${port}`, ...t };
}

async function waitForPort(port: number, timeoutMs: number, alive: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive()) throw new Error('exited');
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`port ${port} did not open within ${timeoutMs} ms`);
}

/** The path of an executable, or undefined (`command -v`, then a few usual places). */
export function which(command: string): string | undefined {
  const found = spawnSync('sh', ['-c', `command -v ${command}`], { encoding: 'utf8' });
  const path = found.stdout.trim();
  if (found.status === 0 && path !== '') return path;
  for (const dir of ['/usr/sbin', '/usr/local/sbin', '/sbin']) {
    const candidate = join(dir, command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not there
    }
  }
  return undefined;
}

/** `<name> <version>` from `binary flag` (e.g. `HAProxy 2.6.12-1+deb12u4`, `nginx 1.22.1`). */
export function versionOf(name: string, binary: string, flag: string): string {
  const out = spawnSync(binary, [flag], { encoding: 'utf8' });
  const text = `${out.stdout ?? ''}${out.stderr ?? ''}`;
  const line = text.split('\n').find((l) => /version/i.test(l)) ?? text.split('\n')[0] ?? '';
  const version = /version:?\s+(?:\S+\/)?(\d[\w.+~-]*)/i.exec(line)?.[1];
  return version === undefined ? line.trim() : `${name} ${version}`;
}

/** What differs between the benchmarks' nginx configurations; the rest is in `spawnNginx`. */
export interface NginxParts {
  /** Directives of the `http` block. */
  http: string[];
  /** Directives of `upstream backends`: its servers, the balancing method, keep-alive. */
  upstream: string[];
  /** Directives of `location /` beyond proxying to the upstream over keep-alive, unbuffered. */
  location: string[];
}

/**
 * Writes an nginx.conf into `dir` and starts nginx on it: one foreground worker, unprivileged,
 * every file (pid, logs, temp paths) in `dir`, proxying everything to `backends` without
 * buffering. A failed start throws with nginx's error log.
 */
export async function spawnNginx(
  binary: string,
  dir: string,
  port: number,
  parts: NginxParts,
): Promise<Child> {
  const config = join(dir, 'nginx.conf');
  writeFileSync(
    config,
    [
      'daemon off;',
      'master_process off;',
      'worker_processes 1;',
      `pid ${join(dir, 'nginx.pid')};`,
      `error_log ${join(dir, 'error.log')} warn;`,
      'worker_rlimit_nofile 8192;',
      'events { worker_connections 8192; }',
      'http {',
      '  access_log off;',
      `  client_body_temp_path ${join(dir, 'body')};`,
      `  proxy_temp_path ${join(dir, 'proxy')};`,
      `  fastcgi_temp_path ${join(dir, 'fastcgi')};`,
      `  uwsgi_temp_path ${join(dir, 'uwsgi')};`,
      `  scgi_temp_path ${join(dir, 'scgi')};`,
      ...parts.http.map((line) => `  ${line}`),
      '  upstream backends {',
      ...parts.upstream.map((line) => `    ${line}`),
      '  }',
      '  server {',
      `    listen 127.0.0.1:${port};`,
      '    location / {',
      '      proxy_pass http://backends;',
      '      proxy_http_version 1.1;',
      '      proxy_set_header Connection "";',
      '      proxy_buffering off;',
      ...parts.location.map((line) => `      ${line}`),
      '    }',
      '  }',
      '}',
      '',
    ].join('\n'),
  );
  try {
    return await spawnListening(
      'nginx',
      binary,
      ['-c', config, '-p', dir, '-e', join(dir, 'error.log')],
      port,
    );
  } catch (err) {
    let log = '';
    try {
      log = readFileSync(join(dir, 'error.log'), 'utf8');
    } catch {
      // none
    }
    throw new Error(`${(err as Error).message}${log}`, { cause: err });
  }
}
