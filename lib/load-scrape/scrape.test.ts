import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { MAX_REPORT_CHARS } from '../model-server-load.ts';
import { scrapeLoad } from './scrape.ts';

const VLLM = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
`;

const LORA = `# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters="law"} 1.79e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.78e+09
`;

describe('scrapeLoad (against a local server)', () => {
  let server: http.Server;
  let base: string;
  const seen: { path: string; headers: http.IncomingHttpHeaders }[] = [];

  before(async () => {
    server = http.createServer((req, res) => {
      seen.push({ path: req.url ?? '', headers: req.headers });
      const text = (type: string, body: string, status = 200): void => {
        res.writeHead(status, { 'content-type': type });
        res.end(body);
      };
      switch (req.url) {
        case '/vllm/metrics':
          return text('text/plain; version=0.0.4; charset=utf-8', VLLM);
        case '/lora/metrics':
          return text('text/plain; version=0.0.4; charset=utf-8', VLLM + LORA);
        case '/untyped/metrics':
          res.end(VLLM);
          return;
        case '/gone/metrics':
          return text('application/json', '{"detail":"Not Found"}', 404);
        case '/locked/metrics':
          return text('application/json', '{}', 401);
        case '/forbidden/metrics':
          return text('application/json', '{}', 403);
        case '/moved/metrics':
          res.writeHead(302, { location: '/vllm/metrics' });
          res.end();
          return;
        case '/broken/metrics':
          return text('text/plain', 'oops', 503);
        case '/html/metrics':
          return text('text/html', '<html>vllm:num_requests_running 3</html>');
        case '/other/metrics':
          return text('text/plain', 'process_cpu_seconds_total 12\n');
        case '/huge/metrics':
          res.writeHead(200, { 'content-type': 'text/plain' });
          res.end('#'.repeat(MAX_REPORT_CHARS + 1));
          return;
        case '/stall/metrics':
          return; // never answers
      }
      text('text/plain', 'unknown', 404);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  const scrape = (path: string, timeoutMs = 2000) => scrapeLoad(`${base}${path}`, { timeoutMs });

  it('reads the LoRA adapters a vLLM server has in use', async () => {
    const outcome = await scrape('/lora/metrics');
    assert.equal(outcome.kind, 'load');
    assert.deepEqual(outcome.kind === 'load' && outcome.load.loadedAdapters, ['sql', 'law']);
  });

  it("reads vLLM's gauges, asks for the Prometheus text format and sends no credentials", async () => {
    assert.deepEqual(await scrape('/vllm/metrics'), {
      kind: 'load',
      load: { running: 3, waiting: 4, kvCacheUsage: 0.5 },
      bytes: Buffer.byteLength(VLLM),
    });
    const request = seen.find((r) => r.path === '/vllm/metrics');
    assert.match(request?.headers.accept ?? '', /^text\/plain;version=0\.0\.4/);
    assert.equal(request?.headers.authorization, undefined);
  });

  it('reads a body without a content type', async () => {
    assert.equal((await scrape('/untyped/metrics')).kind, 'load');
  });

  it('takes 404, 401 and 403 as "no metrics here"', async () => {
    for (const [path, status] of [
      ['/gone/metrics', 404],
      ['/locked/metrics', 401],
      ['/forbidden/metrics', 403],
    ] as const)
      assert.deepEqual(await scrape(path), { kind: 'no-metrics', reason: `HTTP ${status}` });
  });

  it('never follows a redirect: only the endpoint itself is scraped', async () => {
    const before = seen.length;
    assert.deepEqual(await scrape('/moved/metrics'), { kind: 'no-metrics', reason: 'HTTP 302' });
    assert.deepEqual(
      seen.slice(before).map((r) => r.path),
      ['/moved/metrics'],
    );
  });

  it('takes a body that is not a Prometheus exposition with the gauges as "no metrics"', async () => {
    assert.deepEqual(await scrape('/html/metrics'), {
      kind: 'no-metrics',
      reason: 'content-type text/html',
    });
    const other = await scrape('/other/metrics');
    assert.equal(other.kind === 'no-metrics' && other.reason, 'no load gauges');
    // Refused as soon as the cap is passed: read no further.
    const huge = await scrape('/huge/metrics');
    assert.equal(huge.kind, 'no-metrics');
    assert.equal(
      huge.kind === 'no-metrics' && huge.reason,
      `larger than ${MAX_REPORT_CHARS} bytes`,
    );
    assert.ok(huge.kind === 'no-metrics' && (huge.bytes ?? 0) > MAX_REPORT_CHARS);
  });

  it('takes a server error, a refused connection and a timeout as failures', async () => {
    assert.deepEqual(await scrape('/broken/metrics'), {
      kind: 'failed',
      cause: 'error',
      reason: 'HTTP 503',
    });
    assert.deepEqual(await scrape('/stall/metrics', 100), {
      kind: 'failed',
      cause: 'timeout',
      reason: 'timed out',
    });
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    assert.deepEqual(await scrapeLoad(`http://127.0.0.1:${port}/metrics`, { timeoutMs: 2000 }), {
      kind: 'failed',
      cause: 'error',
      reason: 'ECONNREFUSED',
    });
  });

  it('stops at once when the controller stops', async () => {
    const stopping = new AbortController();
    const pending = scrapeLoad(`${base}/stall/metrics`, {
      timeoutMs: 60_000,
      signal: stopping.signal,
    });
    stopping.abort();
    assert.equal((await pending).kind, 'failed');
  });
});
