/**
 * The overhead bench's reference peers, configured as their users would for this traffic:
 * HAProxy and nginx in front of the zero-latency backend, and `wrk` as a C client cross-check.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { trackChild } from '../../harness/child-processes.ts';
import { freePort, spawnListening, spawnNginx, tempDir, type Child } from '../common/peers.ts';

/**
 * HAProxy in front of `backendUrl`: mode http, server-side keep-alive shared across clients,
 * http-no-delay (streaming), its default thread count (one per core).
 */
export async function startHaproxy(binary: string, backendUrl: string): Promise<Child> {
  const dir = tempDir('haproxy');
  const port = await freePort();
  const backend = new URL(backendUrl);
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(
    config,
    [
      'global',
      '  maxconn 8192',
      '',
      'defaults',
      '  mode http',
      '  timeout connect 5s',
      '  timeout client 120s',
      '  timeout server 120s',
      '  timeout http-keep-alive 65s',
      '  option http-keep-alive',
      '  http-reuse always',
      // Forward each SSE chunk at once instead of waiting to fill a packet (MSG_MORE): without
      // it HAProxy holds streamed chunks for 100-200 ms.
      '  option http-no-delay',
      '',
      'frontend bench',
      `  bind 127.0.0.1:${port}`,
      '  default_backend zero',
      '',
      'backend zero',
      '  http-reuse always',
      `  server zero ${backend.hostname}:${backend.port} maxconn 4096`,
      '',
    ].join('\n'),
  );
  return spawnListening('haproxy', binary, ['-f', config, '-db'], port);
}

/** nginx in front of `backendUrl`: an upstream keep-alive pool, no response buffering (SSE). */
export async function startNginx(binary: string, backendUrl: string): Promise<Child> {
  const dir = tempDir('nginx');
  const port = await freePort();
  const backend = new URL(backendUrl);
  return spawnNginx(binary, dir, port, {
    http: ['keepalive_timeout 65s;', 'keepalive_requests 1000000;'],
    upstream: [
      `server ${backend.hostname}:${backend.port};`,
      'keepalive 512;',
      'keepalive_requests 1000000;',
    ],
    location: ['proxy_read_timeout 120s;'],
  });
}

export interface WrkResult {
  concurrency: number;
  rps: number;
  p50Ms?: number | undefined;
  p99Ms?: number | undefined;
}

function wrkMs(value: string | undefined, unit: string | undefined): number | undefined {
  if (value === undefined || unit === undefined) return undefined;
  const scale: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000 };
  return Math.round(Number(value) * (scale[unit] ?? NaN) * 1000) / 1000;
}

/** A closed loop by `wrk` (one thread), POSTing `body` to `url`: the C client cross-check. */
export function runWrk(
  binary: string,
  url: string,
  body: Buffer,
  concurrency: number,
  seconds: number,
): Promise<WrkResult> {
  const dir = tempDir('wrk');
  const script = join(dir, 'post.lua');
  writeFileSync(
    script,
    [
      'wrk.method = "POST"',
      `wrk.body = ${JSON.stringify(body.toString('utf8'))}`,
      'wrk.headers["Content-Type"] = "application/json"',
      '',
    ].join('\n'),
  );
  const child = spawn(
    binary,
    ['-t1', `-c${concurrency}`, `-d${seconds}s`, '--latency', '-s', script, url],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const t = trackChild(child);
  let out = '';
  child.stdout?.setEncoding('utf8');
  child.stdout?.on('data', (text: string) => (out += text));
  const timer = setTimeout(() => void t.stop(1000), (seconds + 15) * 1000);
  return t.exited.then((code) => {
    clearTimeout(timer);
    const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
    if (code !== 0 || rps === null) throw new Error(`wrk failed (${code}): ${out}${t.output()}`);
    const p50 = /^\s+50%\s+([\d.]+)(us|ms|s|m)\s*$/m.exec(out);
    const p99 = /^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$/m.exec(out);
    return {
      concurrency,
      rps: Math.round(Number(rps[1])),
      p50Ms: wrkMs(p50?.[1], p50?.[2]),
      p99Ms: wrkMs(p99?.[1], p99?.[2]),
    };
  });
}
