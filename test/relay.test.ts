/**
 * `switchyard relay`: the controller's stream for standalone sidecars, from pool files. Real
 * simulators, the relay CLI and real sidecars started with `--controller`, as a user runs them.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { balancePool, scratchDir } from '../harness/pool-file.ts';
import {
  controllerSidecarArgs,
  startSim,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../harness/processes.ts';
import { debugBackends, eventually } from './helpers.ts';

/** The first `snapshot` event of a stream, or the refusal's status and JSON. */
async function firstSnapshot(
  url: string,
  token: string,
): Promise<{ status: number; body: unknown; placements: string | null }> {
  const ac = new AbortController();
  const res = await fetch(`${url}/v1/namespaces/default/pools/test/snapshots`, {
    headers: { authorization: `Bearer ${token}` },
    signal: ac.signal,
  });
  try {
    if (res.status !== 200) return { status: res.status, body: await res.json(), placements: null };
    let text = '';
    for await (const chunk of res.body! as AsyncIterable<Uint8Array>) {
      text += Buffer.from(chunk).toString('utf8');
      if (/event: snapshot\n(?:id: \d+\n)?data: .*\n\n/.test(text)) break;
    }
    const data = /event: snapshot\n(?:id: \d+\n)?data: (.*)\n\n/.exec(text)?.[1];
    return {
      status: 200,
      body: data === undefined ? undefined : JSON.parse(data),
      placements: res.headers.get('x-switchyard-placements'),
    };
  } finally {
    ac.abort();
  }
}

/** The sum of a counter's samples on a sidecar's admin /metrics. */
async function counter(sidecar: RunningProcess, name: string): Promise<number> {
  const text = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
  return sum;
}

describe('switchyard relay', () => {
  it('serves a pool file to sidecars: snapshot, load, placements, and a change of it live', async () => {
    const { dir, cleanup } = await scratchDir();
    const started: RunningProcess[] = [];
    try {
      const sims = [await startSim('a'), await startSim('b'), await startSim('c')];
      started.push(...sims);
      const poolFile = join(dir, 'pool.yaml');
      await writeFile(poolFile, balancePool(sims.slice(0, 2).map((s) => s.url)));
      const tokenFile = join(dir, 'token');
      await writeFile(tokenFile, 'shared-secret\n');
      const relay = await startSwitchyard([
        'relay',
        ...['--pool-file', poolFile, '--listen', '127.0.0.1:0', '--token-file', tokenFile],
        ...['--load-scrape-every', '100ms', '--log-level', 'warn'],
      ]);
      started.push(relay);
      const sidecars: RunningProcess[] = [];
      for (const id of ['app-1', 'app-2']) {
        const sidecar = await startSwitchyard([
          ...controllerSidecarArgs({
            controllerUrl: relay.url,
            namespace: 'default',
            pool: 'test',
            tokenFile,
            sidecarId: id,
          }),
          ...['--log-level', 'warn'],
        ]);
        started.push(sidecar);
        sidecars.push(sidecar);
        // The pool from the relay, and every server's load from the relay's scrapes (a sidecar
        // with --controller leaves scraping to its controller), before any request.
        await eventually(
          async () => {
            const debug = await debugBackends(sidecar);
            return (
              debug.endpoints.length === 2 &&
              debug.endpoints.every((e) => e.reported !== null && e.reported.running === 0)
            );
          },
          10_000,
          "the pool and the relay's load on every endpoint",
        );
      }
      const client = new OpenAI({ baseURL: `${sidecars[0]!.url}/v1`, apiKey: 'k', maxRetries: 0 });
      const answer = await client.chat.completions.create({
        model: 'm',
        messages: [
          { role: 'system', content: 'You answer questions about trains. '.repeat(20) },
          { role: 'user', content: 'When does the last one leave?' },
        ],
      });
      assert.ok((answer.choices[0]?.message.content ?? '').length > 0);
      // The second sidecar sent nothing, yet hears of the first one's placement.
      await eventually(
        async () => (await counter(sidecars[1]!, 'switchyard_placements_received_total')) >= 1,
        5_000,
        "the second sidecar to receive the first one's placement",
      );
      assert.ok((await counter(sidecars[0]!, 'switchyard_placements_uploaded_total')) >= 1);
      // The relay's own metrics, on its port (it has no admin port).
      const relayMetrics = await (await fetch(`${relay.url}/metrics`)).text();
      assert.match(relayMetrics, /^switchyard_controller_placements_received_total [1-9]/m);
      assert.match(relayMetrics, /^switchyard_controller_load_scrapes_total\{result="ok"\} [1-9]/m);

      // A third backend added to the file reaches the running sidecars as an `endpoints` delta
      // (issue 46: they ask for deltas, and only the endpoints changed), not a full snapshot.
      await writeFile(poolFile, balancePool(sims.map((s) => s.url)));
      for (const sidecar of sidecars) {
        await eventually(
          async () => (await debugBackends(sidecar)).endpoints.length === 3,
          10_000,
          'the changed pool file applied',
        );
        // The admin reuses its /metrics text for a second: wait for the render after the delta.
        await eventually(
          async () =>
            /^switchyard_snapshot_deltas_total\{[^}]*result="applied"[^}]*\} 1$/m.test(
              await (await fetch(`${sidecar.adminUrl}/metrics`)).text(),
            ),
          5_000,
          'the change applied as a delta',
        );
        const metrics = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
        assert.doesNotMatch(metrics, /^switchyard_snapshot_deltas_total\{[^}]*result="rejected"/m);
      }
      // An invalid change is refused and the last good pool stays.
      await writeFile(poolFile, balancePool(['ftp://10.0.0.1']));
      await new Promise((r) => setTimeout(r, 1_500));
      assert.equal((await debugBackends(sidecars[0]!)).endpoints.length, 3);
      assert.match(relay.output(), /pool file change rejected/);
    } finally {
      await stopAll(started);
      await cleanup();
    }
  });

  it('takes only its token, and gives API keys to those who have it', async () => {
    const { dir, cleanup } = await scratchDir();
    const started: RunningProcess[] = [];
    try {
      const poolFile = join(dir, 'pool.yaml');
      await writeFile(
        poolFile,
        [
          'apiVersion: switchyard.dev/v1alpha1',
          'kind: InferencePool',
          'metadata: {name: test}',
          'spec:',
          '  backends:',
          '  - {name: p, url: "http://127.0.0.1:9/v1", apiKeyEnv: PROVIDER_KEY}',
          '',
        ].join('\n'),
      );
      const tokenFile = join(dir, 'token');
      await writeFile(tokenFile, 'shared-secret');
      const relay = await startSwitchyard(
        ['relay', '--pool-file', poolFile, '--listen', '127.0.0.1:0', '--token-file', tokenFile],
        { env: { PROVIDER_KEY: 'sk-provider' } },
      );
      started.push(relay);
      const refused = await firstSnapshot(relay.url, 'guess');
      assert.equal(refused.status, 401);
      assert.deepEqual((refused.body as { error: { code: string } }).error.code, 'unauthenticated');
      const ok = await firstSnapshot(relay.url, 'shared-secret');
      assert.equal(ok.status, 200);
      const snapshot = ok.body as { endpoints: { apiKey?: string }[] };
      assert.equal(snapshot.endpoints[0]?.apiKey, 'sk-provider');
    } finally {
      await stopAll(started);
      await cleanup();
    }
  });

  it('refuses to listen off loopback without a token, and names a bad pool file field', async () => {
    const { dir, cleanup } = await scratchDir();
    try {
      const poolFile = join(dir, 'pool.yaml');
      await writeFile(poolFile, balancePool(['http://127.0.0.1:9']));
      await assert.rejects(
        startSwitchyard(['relay', '--pool-file', poolFile, '--listen', '0.0.0.0:0']),
        /not loopback: give --token-file/,
      );
      await writeFile(poolFile, balancePool(['ftp://10.0.0.1']));
      await assert.rejects(
        startSwitchyard(['relay', '--pool-file', poolFile, '--listen', '127.0.0.1:0']),
        /spec\.backends\[0\]\.url/,
      );
    } finally {
      await cleanup();
    }
  });
});
