/**
 * The client's side of `endpoints` deltas (issue 46), against a scripted controller over real
 * HTTP: it asks for them, applies one to the snapshot its stream delivered, and drops the stream
 * for a full snapshot when one does not apply (another base, a hash mismatch).
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { parse } from 'yaml';
import { contentHash } from '../../../crds/content-hash.ts';
import { BALANCE_EXAMPLE } from '../../../crds/examples.ts';
import type { EndpointSpec } from '../../../crds/policy-types.ts';
import { resolvePool } from '../../../crds/resolve.ts';
import { endpointsDelta } from '../../../crds/snapshot-delta.ts';
import type { EndpointsDelta, PoolSnapshot } from '../../../crds/snapshot.ts';
import { validatePool } from '../../../crds/validate.ts';
import { DualHttpServer } from '../../../lib/dual-http-server.ts';
import { startControllerClient } from './controller-client.ts';

const RESOLVED = (() => {
  const validated = validatePool(parse(BALANCE_EXAMPLE));
  assert.ok(validated.ok);
  const resolved = resolvePool(validated.pool, {});
  assert.ok(resolved.ok);
  return resolved;
})();

function snapshot(version: number, ns: number[]): PoolSnapshot {
  const endpoints: EndpointSpec[] = ns.map((n) => ({
    id: `gpus/10.0.0.${String(n).padStart(2, '0')}:8000`,
    backend: 'gpus',
    tier: 0,
    url: `http://10.0.0.${n}:8000/v1`,
    costPerMTok: 0,
  }));
  const { policy, timeouts } = RESOLVED;
  // As it arrives: through JSON (the resolved policy has undefined fields JSON leaves out).
  return JSON.parse(
    JSON.stringify({
      version,
      hash: contentHash({ policy, timeouts, endpoints }),
      pool: { namespace: 'apps', name: 'chat' },
      policy,
      timeouts,
      endpoints,
    }),
  ) as PoolSnapshot;
}

const full = (s: PoolSnapshot): string =>
  `event: snapshot\nid: ${s.version}\ndata: ${JSON.stringify(s)}\n\n`;
const delta = (d: EndpointsDelta): string =>
  `event: endpoints\nid: ${d.version}\ndata: ${JSON.stringify(d)}\n\n`;

describe('controller client: endpoints deltas', () => {
  let dir: string;
  let tokenFile: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'deltas-'));
    tokenFile = join(dir, 'token');
    await writeFile(tokenFile, 'tok\n');
  });
  after(() => rm(dir, { recursive: true, force: true }));

  /**
   * A controller that answers the n-th stream request with `script[n]` (events, then held open),
   * and records each request's URL.
   */
  async function scripted(script: string[][]): Promise<{
    url: string;
    requests: string[];
    close(): Promise<void>;
  }> {
    const requests: string[] = [];
    const server = new DualHttpServer({}, (req, res) => {
      if (req.method === 'POST') {
        req.resume();
        res.writeHead(204).end();
        return;
      }
      const events = script[requests.length] ?? [];
      requests.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-switchyard-protocol': '1' });
      for (const e of events) res.write(e);
    });
    await new Promise<void>((r) => server.server.listen(0, '127.0.0.1', r));
    return {
      url: `http://127.0.0.1:${(server.server.address() as AddressInfo).port}`,
      requests,
      close: async () => {
        server.closeAllConnections();
        await new Promise<void>((r) => server.close(() => r()));
      },
    };
  }

  async function run(
    script: string[][],
    until: (applied: PoolSnapshot[]) => boolean,
    cacheFile?: string,
  ) {
    const fc = await scripted(script);
    const applied: PoolSnapshot[] = [];
    const deltas: boolean[] = [];
    const logs: { level: number; msg: string }[] = [];
    const client = startControllerClient({
      controllerUrl: fc.url,
      namespace: 'apps',
      pool: 'chat',
      tokenFile,
      sidecarId: 'app-1',
      cacheFile,
      reportEveryMs: 60_000,
      backoff: { initialMs: 10, maxMs: 40 },
      logger: pino(
        { level: 'debug' },
        { write: (line: string) => logs.push(JSON.parse(line) as { level: number; msg: string }) },
      ),
      onSnapshot: (s) => {
        if (applied.at(-1)?.hash === s.hash) return false;
        applied.push(s);
        return true;
      },
      onDelta: (ok) => deltas.push(ok),
      currentEndpoints: () => [],
    });
    const deadline = Date.now() + 5_000;
    while (!until(applied)) {
      assert.ok(
        Date.now() < deadline,
        `timed out; applied ${applied.map((s) => s.version).join(',')}`,
      );
      await new Promise((r) => setTimeout(r, 10));
    }
    await client.close();
    await fc.close();
    return { applied, deltas, requests: fc.requests, logs };
  }

  const v1 = snapshot(1, [1, 2, 3, 4, 5, 6]);
  const v2 = snapshot(2, [1, 2, 3, 5, 6, 7]);
  const v3 = snapshot(3, [1, 2, 3, 5, 6, 7, 8]);

  test('asks for deltas and applies them to the snapshot its stream delivered', async () => {
    const r = await run(
      [[full(v1), delta(endpointsDelta(v1, v2)!), delta(endpointsDelta(v2, v3)!)]],
      (a) => a.at(-1)?.version === 3,
    );
    assert.match(r.requests[0]!, /[?&]deltas=1(&|$)/);
    assert.deepEqual(r.applied, [v1, v2, v3]);
    assert.deepEqual(r.deltas, [true, true]);
    assert.equal(r.requests.length, 1, 'no reconnect');
  });

  test('the cache file holds the full snapshot built from the deltas', async () => {
    const cacheFile = join(dir, 'snapshot.json');
    await run(
      [[full(v1), delta(endpointsDelta(v1, v2)!), delta(endpointsDelta(v2, v3)!)]],
      (a) => a.at(-1)?.version === 3,
      cacheFile,
    );
    assert.deepEqual(JSON.parse(await readFile(cacheFile, 'utf8')), v3);
  });

  test('a delta from another base: reconnects, and the full snapshot of the next stream applies', async () => {
    const r = await run(
      [[full(v1), delta(endpointsDelta(v2, v3)!)], [full(v3)]],
      (a) => a.at(-1)?.version === 3,
    );
    assert.deepEqual(r.applied, [v1, v3]);
    assert.deepEqual(r.deltas, [false]);
    assert.equal(r.requests.length, 2);
    const warned = r.logs.filter((l) => l.level === 40 && /delta not applied/.test(l.msg));
    assert.equal(warned.length, 1);
  });

  test('a delta whose list does not hash as the controller said: reconnects for the full snapshot', async () => {
    const bad = { ...endpointsDelta(v1, v2)!, endpointsHash: '0123456789abcdef' };
    const r = await run([[full(v1), delta(bad), full(v3)], [full(v2)]], (a) => a.length >= 2);
    // The event after the bad delta on the dropped stream is not taken: v2 comes whole next.
    assert.deepEqual(r.applied, [v1, v2]);
    assert.deepEqual(r.deltas, [false]);
    assert.equal(r.requests.length, 2);
  });

  test('a delta before any snapshot of the stream is refused (a cached one is no base)', async () => {
    const r = await run([[delta(endpointsDelta(v1, v2)!)], [full(v2)]], (a) => a.length >= 1);
    assert.deepEqual(r.applied, [v2]);
    assert.deepEqual(r.deltas, [false]);
  });
});
