/**
 * Server-reported load end to end, on the real API server (harness/k8s/cluster.ts): two model
 * "servers" on test hosts behind a Service — one serving vLLM's /metrics from a file the test
 * rewrites, one answering 404 like an external provider — and two controller replicas. A stream
 * reader on each replica (whichever leads) must see `load` events with the server's values, and
 * no snapshot because of them; the 404 server is asked once per replica and then left alone, with
 * nothing logged; a sidecar on the same stream counts the server's queue in its balancer. The
 * same two replicas relay placements (issue 45): one uploaded at one replica reaches a stream
 * subscribed at the other (the latency is printed).
 *
 * The servers are tiny static HTTP servers, so the test sets the exact values they report.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import {
  parseLoad,
  parsePlacements,
  placementsPath,
  PLACEMENTS_HEADER,
  type PoolLoad,
  type PoolPlacements,
} from '../../crds/snapshot.ts';
import { decodeHashes, encodeHashes } from '../../lib/placement-hashes.ts';
import type { RunningProcess } from '../../harness/processes.ts';
import { waitFor } from '../../harness/k8s/cluster.ts';
import {
  POOL_NAMESPACE,
  POOL_PATH,
  startServicePool,
  type ServicePool,
} from './test-controller.ts';
import { assertTestAddress, type TestHost } from './test-hosts.ts';
import { keepSending, type Traffic } from './traffic.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const SCRAPE_EVERY = '500ms';

/**
 * A model server's /metrics: the text of FILE (re-read at every request), or a 404 with a JSON
 * body when FILE is `-`. GET /count answers how often /metrics was asked. It answers chat
 * completions too, at once and always the same, so that sidecars can send it traffic.
 */
const METRICS_SERVER = `
const http = require('node:http');
const fs = require('node:fs');
const [port, file] = process.argv.slice(1);
let scrapes = 0;
const completion = JSON.stringify({
  id: 'c-1', object: 'chat.completion', created: 0, model: 'llama',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});
http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/v1/chat/completions') {
    req.resume();
    return req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(completion);
    });
  }
  if (req.url === '/count') return res.end(String(scrapes));
  if (req.url !== '/metrics') { res.writeHead(404); return res.end(); }
  scrapes++;
  if (file === '-') {
    res.writeHead(404, { 'content-type': 'application/json' });
    return res.end('{"detail":"Not Found"}');
  }
  res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
  res.end(fs.readFileSync(file));
}).listen(Number(port), '0.0.0.0', () => console.log('listening'));
`;

function vllmMetrics(running: number, waiting: number, kv: number): string {
  return [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    `vllm:num_requests_running{engine="0",model_name="llama"} ${running}.0`,
    '# TYPE vllm:num_requests_waiting gauge',
    `vllm:num_requests_waiting{engine="0",model_name="llama"} ${waiting}.0`,
    '# TYPE vllm:kv_cache_usage_perc gauge',
    `vllm:kv_cache_usage_perc{engine="0",model_name="llama"} ${kv}`,
    '# TYPE vllm:prefix_cache_queries_total counter',
    'vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 1234.0',
    '',
  ].join('\n');
}

/** A subscriber that reads the stream as a sidecar would and keeps every event it gets. */
interface StreamReader {
  snapshots: { version: number; hash: string }[];
  loads: PoolLoad[];
  /** Each `placements` event, with when it arrived (performance.now()). */
  placements: { atMs: number; batch: PoolPlacements }[];
  /** The stream response's x-switchyard-placements header. */
  placementsHeader: string | undefined;
  close(): void;
}

/** Opens the pool's stream on `controllerUrl` (retrying until the replica knows the pool). */
async function openStream(controllerUrl: string, token: string, id: string): Promise<StreamReader> {
  const poolUrl = `${controllerUrl}/v1/namespaces/${POOL_NAMESPACE}/pools/chat`;
  const url = `${poolUrl}/snapshots?sidecar=${id}`;
  return waitFor(
    `the stream of ${controllerUrl}`,
    () =>
      new Promise<StreamReader | undefined>((resolve, reject) => {
        const reader: StreamReader = {
          snapshots: [],
          loads: [],
          placements: [],
          placementsHeader: undefined,
          close: () => req.destroy(),
        };
        const req = http.get(url, { headers: { authorization: `Bearer ${token}` } }, (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            resolve(undefined);
            return;
          }
          reader.placementsHeader = res.headers[PLACEMENTS_HEADER] as string | undefined;
          res.setEncoding('utf8');
          let buffer = '';
          res.on('data', (chunk: string) => {
            buffer += chunk;
            for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
              const block = buffer.slice(0, end);
              buffer = buffer.slice(end + 2);
              const type = /^event: (.*)$/m.exec(block)?.[1];
              const data = /^data: (.*)$/m.exec(block)?.[1];
              if (data === undefined) continue;
              if (type === 'snapshot') {
                const { version, hash } = JSON.parse(data) as { version: number; hash: string };
                reader.snapshots.push({ version, hash });
              } else if (type === 'load') {
                assert.equal(/^id:/m.test(block), false, 'a load event carries no id');
                const parsed = parseLoad(JSON.parse(data));
                assert.ok(parsed.ok, `parseLoad: ${JSON.stringify(parsed)}`);
                reader.loads.push(parsed.value);
              } else if (type === 'placements') {
                assert.equal(/^id:/m.test(block), false, 'a placements event carries no id');
                const parsed = parsePlacements(JSON.parse(data));
                assert.ok(parsed.ok, `parsePlacements: ${JSON.stringify(parsed)}`);
                reader.placements.push({ atMs: performance.now(), batch: parsed.value });
              }
            }
          });
          resolve(reader);
        });
        req.on('error', reject);
      }),
  );
}

describe(
  'server-reported load on a real API server',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let pool: ServicePool;
    let metricsFile: string;
    const readers: StreamReader[] = [];
    let sidecar: RunningProcess | undefined;
    const id = (h: TestHost): string => pool.endpointId(h);

    const scrapesOf = async (h: TestHost): Promise<number> => {
      assertTestAddress(h.ip);
      return Number(await (await fetch(`http://${h.ip}:8000/count`)).text());
    };
    const controllerMetrics = async (c: RunningProcess): Promise<string> =>
      (await fetch(`${c.adminUrl}/metrics`)).text();
    const latest = (r: StreamReader, h: TestHost) =>
      r.loads.at(-1)?.endpoints.find((e) => e.id === id(h));

    // The controllers' own ServiceAccount token (a pod's mounted one, in a cluster): the replicas
    // relay placements to each other with it, and accept only it.
    const peerDir = mkdtempSync(join(tmpdir(), 'switchyard-load-e2e-peer-'));
    const peerTokenFile = join(peerDir, 'token');

    before(async () => {
      pool = await startServicePool({
        name: 'load-e2e',
        hosts: ['vllm', 'provider'],
        serve: async (host, label, dir) => {
          let file = '-'; // the provider: /metrics is a 404
          if (label === 'vllm') {
            metricsFile = join(dir, 'metrics.txt');
            writeFileSync(metricsFile, vllmMetrics(3, 4, 0.5));
            file = metricsFile;
          }
          const server = host.spawn(process.execPath, ['-e', METRICS_SERVER, '8000', file]);
          await server.waitForLine(/listening/);
          return server;
        },
        controllers: ['controller-0', 'controller-1'].map((identity) => [
          '--identity',
          identity,
          '--load-scrape-every',
          SCRAPE_EVERY,
          '--peer-token-file',
          peerTokenFile,
        ]),
      });
      const { token } = await pool.cluster.createServiceAccountToken(
        'switchyard',
        'switchyard-controller',
        { audience: pool.cluster.apiAudience },
      );
      writeFileSync(peerTokenFile, token);
    });

    after(async () => {
      for (const r of readers) r.close();
      await pool?.stop();
      rmSync(peerDir, { recursive: true, force: true });
    });

    it('streams what the server reports to the subscribers of every replica, as load events', async () => {
      for (const [i, c] of pool.controllers.entries())
        readers.push(await openStream(c.url, pool.token, `reader-${i}`));
      const [vllm, provider] = [pool.hosts[0]!, pool.hosts[1]!];
      for (const r of readers) {
        const seen = await waitFor('the first reading', () => latest(r, vllm), {
          timeoutMs: 15_000,
        });
        assert.deepEqual(
          { ...seen, ageMs: 0 },
          { id: id(vllm), running: 3, waiting: 4, kvCacheUsage: 0.5, ageMs: 0 },
        );
        assert.equal(
          r.loads.some((l) => l.endpoints.some((e) => e.id === id(provider))),
          false,
          'the server without metrics has no load',
        );
      }
      writeFileSync(metricsFile, vllmMetrics(7, 0, 0.9));
      for (const r of readers)
        await waitFor('the new reading', () => latest(r, vllm)?.running === 7, {
          timeoutMs: 15_000,
        });
      assert.deepEqual(
        readers.map((r) => {
          const { ageMs: _, ...rest } = latest(r, vllm)!;
          return rest;
        }),
        [0, 1].map(() => ({ id: id(vllm), running: 7, waiting: 0, kvCacheUsage: 0.9 })),
      );
    });

    it('relays a placement uploaded at one replica to the stream subscribed at the other', async (t) => {
      const [a, b] = pool.controllers as [RunningProcess, RunningProcess];
      const [atA, atB] = readers as [StreamReader, StreamReader];
      assert.equal(atB.placementsHeader, '8192');
      const endpoint = id(pool.hosts[0]!);
      let next = 1000;
      /** Uploads a placement of a new prompt at replica A; its deepest hash. */
      const upload = async (): Promise<number> => {
        const deepest = next++;
        const res = await fetch(`${a.url}${placementsPath(POOL_NAMESPACE, 'chat')}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${pool.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            endpoints: [endpoint],
            placements: [{ endpoint: 0, ageMs: 0, hashes: encodeHashes([1, 2, deepest]) }],
          }),
        });
        assert.equal(res.status, 204);
        return deepest;
      };
      const arrival = (r: StreamReader, deepest: number): number | undefined =>
        r.placements.find(({ batch }) =>
          batch.placements.some(
            (p) =>
              batch.endpoints[p.endpoint] === endpoint &&
              decodeHashes(p.hashes)?.at(-1) === deepest,
          ),
        )?.atMs;
      // Until replica A has read B's address from its summary Lease (every 5 s).
      await waitFor(
        'a placement uploaded at A on the stream of B',
        async () => (await upload()) > 0 && atB.placements.length > 0,
        { timeoutMs: 20_000, intervalMs: 250 },
      );
      const latencies: number[] = [];
      for (let i = 0; i < 10; i++) {
        const sentAt = performance.now();
        const deepest = await upload();
        const at = await waitFor('the placement at B', () => arrival(atB, deepest), {
          timeoutMs: 5_000,
        });
        latencies.push(at - sentAt);
        assert.ok(arrival(atA, deepest) !== undefined, 'and on the stream of A itself');
      }
      latencies.sort((x, y) => x - y);
      t.diagnostic(
        `upload at A → event at B: median ${latencies[5]!.toFixed(0)} ms, max ${latencies[9]!.toFixed(0)} ms (loaded machine)`,
      );
      assert.ok(latencies[9]! < 2_000, `${latencies.join(', ')} ms`);

      // Once each: B does not send it back, and a repeat within 10 s is not relayed again.
      const repeat = next - 1;
      await fetch(`${a.url}${placementsPath(POOL_NAMESPACE, 'chat')}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${pool.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          endpoints: [endpoint],
          placements: [{ endpoint: 0, ageMs: 0, hashes: encodeHashes([repeat]) }],
        }),
      });
      await new Promise((resolve) => setTimeout(resolve, 500));
      const count = (r: StreamReader): number =>
        r.placements.filter(({ batch }) =>
          batch.placements.some((p) => decodeHashes(p.hashes)?.at(-1) === repeat),
        ).length;
      assert.deepEqual([count(atA), count(atB)], [1, 1]);
      const metricsOf = await Promise.all([a, b].map((c) => controllerMetrics(c)));
      assert.match(metricsOf[0]!, /^switchyard_controller_placements_received_total [1-9]/m);
      assert.match(metricsOf[1]!, /^switchyard_controller_placements_received_total 0$/m);
      assert.match(
        metricsOf[0]!,
        /^switchyard_controller_placements_dropped_total\{reason="duplicate"\} [1-9]/m,
      );

      // The replicas' route takes only the controller's own ServiceAccount.
      const stranger = await fetch(`${b.url}/v1/internal/placements`, {
        method: 'POST',
        headers: { authorization: `Bearer ${pool.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ pools: {} }),
      });
      assert.equal(stranger.status, 403);
    });

    it('sends no snapshot because of them: the version and hash stay put', async () => {
      for (const r of readers) {
        const seen = r.loads.length;
        await waitFor('three more load events', () => r.loads.length >= seen + 3, {
          timeoutMs: 15_000,
        });
      }
      const served = readers[0]!.snapshots[0];
      await waitFor('the served snapshot in status', async () => {
        const status = (
          await pool.cluster.request<{
            status?: { snapshot?: { version: number; hash: string } };
          }>('GET', POOL_PATH)
        ).body.status?.snapshot;
        return status?.version === served?.version && status?.hash === served?.hash;
      });
      for (const r of readers) assert.deepEqual(r.snapshots, [served], 'one snapshot, the first');
    });

    it('asks the server without metrics once per replica, then leaves it alone without a word', async () => {
      const [vllm, provider] = [pool.hosts[0]!, pool.hosts[1]!];
      const before = await scrapesOf(vllm);
      // Six more periods.
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      assert.ok((await scrapesOf(vllm)) > before, 'the vLLM server is still scraped');
      assert.equal(await scrapesOf(provider), pool.controllers.length);
      for (const c of pool.controllers) {
        const metrics = await controllerMetrics(c);
        assert.match(
          metrics,
          /^switchyard_controller_load_scrapes_total\{result="no_metrics"\} 1$/m,
        );
        assert.match(metrics, /^switchyard_controller_load_scrapes_total\{result="ok"\} [1-9]/m);
        assert.match(metrics, /^switchyard_controller_load_targets\{state="no_metrics"\} 1$/m);
        assert.match(metrics, /^switchyard_controller_load_targets\{state="reporting"\} 1$/m);
        assert.match(metrics, /^switchyard_controller_load_scrape_duration_seconds_count [1-9]/m);
        // At the default level (info), nothing about scraping; nothing louder about that server.
        const loud = c
          .output()
          .split('\n')
          .filter(
            (l) =>
              /no load metrics|load scrape|reports load/.test(l) ||
              (l.includes(provider.ip) && /"level":(40|50|60)/.test(l)),
          );
        assert.deepEqual(loud, []);
      }
    });

    it("a sidecar applies the load events: its balancer counts the server's queue", async () => {
      sidecar = await pool.startSidecar('app-1');
      await waitFor(
        'the sidecar ready',
        async () => (await fetch(`${sidecar!.adminUrl}/readyz`)).ok,
      );
      const loads = readers[0]!.loads.length;
      await waitFor('three more load events', () => readers[0]!.loads.length >= loads + 3, {
        timeoutMs: 15_000,
      });
      assert.equal((await fetch(`${sidecar.adminUrl}/readyz`)).status, 200);
      const [vllm, provider] = [pool.hosts[0]!, pool.hosts[1]!];
      const debug = (await (await fetch(`${sidecar.adminUrl}/debug/backends`)).json()) as {
        endpoints: { id: string; load: number; reported: Record<string, number> | null }[];
      };
      const seen = debug.endpoints.find((e) => e.id === id(vllm))!;
      const { ageMs: _, ...reported } = seen.reported ?? {};
      assert.deepEqual(reported, { running: 7, waiting: 0, kvCacheUsage: 0.9 });
      assert.equal(seen.load, 7, "the server's running requests, none of them this sidecar's");
      assert.equal(debug.endpoints.find((e) => e.id === id(provider))!.reported, null);
      const complaints = sidecar
        .output()
        .split('\n')
        .filter((l) => /"level":(40|50|60)/.test(l));
      assert.deepEqual(complaints, []);
    });

    /** The replica holding the lease, and the other one. */
    const roles = async (): Promise<{ leader: RunningProcess; follower: RunningProcess }> => {
      const leader = await waitFor('a leader', async () => {
        for (const c of pool.controllers)
          if (/^switchyard_controller_leader 1$/m.test(await controllerMetrics(c))) return c;
        return undefined;
      });
      return { leader, follower: pool.controllers.find((c) => c !== leader)! };
    };
    /** The `switchyard_pool_*` gauges of apps/chat on `c`, by name without the prefix. */
    const gauges = async (c: RunningProcess): Promise<Record<string, number>> =>
      Object.fromEntries(
        (await controllerMetrics(c))
          .split('\n')
          .filter((l) => l.startsWith('switchyard_pool_'))
          .map((l) => {
            const m = /^switchyard_pool_(\w+)\{namespace="apps",pool="chat"\} (\S+)$/.exec(l);
            assert.ok(m, `a pool gauge of apps/chat: ${l}`);
            return [m[1]!, Number(m[2])];
          }),
      );

    it("the leader exports the pool's autoscaling gauges: its servers' load, the sidecars' demand", async () => {
      const { leader, follower } = await roles();
      // What the vLLM server reports since the first test rewrote it; the provider reports none.
      assert.deepEqual(await gauges(leader), {
        server_requests_waiting: 0,
        server_requests_running: 7,
        server_kv_cache_usage_mean: 0.9,
        server_kv_cache_usage_max: 0.9,
        ready_endpoints: 2,
        demand_requests_per_second: 0,
        demand_shed_per_second: 0,
        demand_queued_requests: 0,
        demand_held_requests: 0,
      });
      assert.deepEqual(await gauges(follower), {}, 'only the leader exports them');

      // One sidecar on each replica, each reporting every second and sent about 10 requests a
      // second: the leader adds the follower's (relayed by its summary Lease) to its own.
      const started = await Promise.all([
        pool.startSidecar('app-2', leader, { reportEvery: '1s' }),
        pool.startSidecar('app-3', follower, { reportEvery: '1s' }),
      ]);
      const traffic: { load: Traffic; sinceMs: number }[] = [];
      try {
        for (const s of started) {
          await waitFor('the sidecar ready', async () => (await fetch(`${s.adminUrl}/readyz`)).ok);
          const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
          const send = async (): Promise<true | string> => {
            const answer = await client.chat.completions.create({
              model: 'llama',
              messages: [{ role: 'user', content: 'hi' }],
            });
            await new Promise((resolve) => setTimeout(resolve, 100));
            return answer.choices[0]?.message.content === 'hi' ? true : 'an unexpected answer';
          };
          traffic.push({ load: keepSending(send), sinceMs: performance.now() });
        }
        const rate = (t: (typeof traffic)[number]): number =>
          t.load.count().sent / ((performance.now() - t.sinceMs) / 1000);
        // Each sidecar's reports cover its last second, the follower's reach the leader within two
        // summary periods: near the rate the clients keep up, once they have kept it up a while.
        const near = (value: number | undefined, expected: number): boolean =>
          value !== undefined &&
          traffic.every((t) => t.load.count().sent >= 20) &&
          Math.abs(value - expected) <= 0.25 * expected;
        const both = await waitFor(
          "both sidecars' demand on the leader",
          async () => {
            const g = await gauges(leader);
            return near(g.demand_requests_per_second, rate(traffic[0]!) + rate(traffic[1]!))
              ? g
              : undefined;
          },
          { timeoutMs: 25_000 },
        );
        assert.equal(both.demand_shed_per_second, 0);
        assert.equal(both.demand_queued_requests, 0);
        assert.equal(both.demand_held_requests, 0);
        // The leader's own sidecar leaves: its demand no longer counts, the follower's still does.
        const [local, relayed] = [traffic[0]!, traffic[1]!];
        await local.load.stop();
        await started[0].stop();
        await waitFor(
          "only the follower's sidecar's demand",
          async () => near((await gauges(leader)).demand_requests_per_second, rate(relayed)),
          { timeoutMs: 5_000 },
        );
        for (const t of traffic)
          assert.equal(t.load.count().failed, 0, t.load.count().firstFailure);
      } finally {
        await Promise.all(traffic.map((t) => t.load.stop()));
        await Promise.all(started.map((s) => s.stop()));
      }
    });

    it("a leader no sidecar of the pool is subscribed to reads the servers' load the other replica scrapes", async () => {
      const { leader } = await roles();
      // Nothing of the pool subscribed to the leader any more: it stops scraping the pool; the
      // follower (its reader stays) scrapes on and relays its reading through its summary Lease.
      readers[pool.controllers.indexOf(leader)]!.close();
      await sidecar?.stop();
      sidecar = undefined;
      writeFileSync(metricsFile, vllmMetrics(5, 2, 0.4));
      const relayed = await waitFor(
        "the follower's reading on the leader",
        async () => {
          const g = await gauges(leader);
          return g.server_requests_running === 5 ? g : undefined;
        },
        { timeoutMs: 20_000 },
      );
      assert.equal(relayed.server_requests_waiting, 2);
      assert.equal(relayed.server_kv_cache_usage_mean, 0.4);
      assert.equal(relayed.server_kv_cache_usage_max, 0.4);
      assert.equal(relayed.ready_endpoints, 2);
    });

    it('stops scraping once no sidecar of the pool is subscribed', async () => {
      await sidecar?.kill();
      sidecar = undefined;
      for (const r of readers) r.close();
      const vllm = pool.hosts[0]!;
      // In-flight scrapes and the next period may still land; after that, nothing.
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const settled = await scrapesOf(vllm);
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      assert.equal(await scrapesOf(vllm), settled);
    });
  },
);
