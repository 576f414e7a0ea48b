/**
 * The `gaie-epp` peer end to end: GAIE's full endpoint picker (cmd/epp of v1.5.0, its default
 * scheduling profile) on the harness's kube-apiserver, the ext_proc stand-in for Envoy in front,
 * two real simulators behind (whose vLLM metrics it scrapes), the official `openai` client in
 * front. Checks what the bench relies on: streamed answers arrive through the EPP's response
 * phases; a repeated long prompt keeps going where its prefix went (the prefix-cache scorer,
 * weight 3, outweighs the queue and KV-cache scorers of idle pods); a pool with no ready pod is a
 * 503 (the EPP's immediate response, which the stand-in passes on).
 *
 * Never skipped: the picker is built on first use (scripts/gaie/build-epp.sh, minutes on a cold
 * Go cache; `npm test` runs it as the `gaie:build` step before this file).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import { buildGaie, NAMESPACE, SERVED_HEADER, startGaieEpp } from '../../bench/routing/gaie.ts';
import type { RouterSet } from '../../bench/routing/policy-definition.ts';

describe('gaie-epp: GAIE’s full endpoint picker behind the ext_proc stand-in', () => {
  let cluster: Cluster;
  let sims: RunningProcess[] = [];
  let epp: RouterSet;
  let client: OpenAI;

  before(
    async () => {
      [, cluster, ...sims] = await Promise.all([
        buildGaie('epp'),
        startCluster(),
        startSwitchyard(['sim', '--port', '0', '--name', 'b0']),
        startSwitchyard(['sim', '--port', '0', '--name', 'b1']),
      ]);
      epp = await startGaieEpp(
        cluster,
        { backends: sims.map((s, i) => ({ name: `b${i}`, url: s.url, costPerMTok: 1 })) },
        'epp',
      );
      client = new OpenAI({ baseURL: `${epp.urls[0]}/v1`, apiKey: 'none', maxRetries: 0 });
    },
    { timeout: 15 * 60_000 },
  );

  after(async () => {
    await epp?.stop();
    await Promise.all(sims.map((s) => s.stop()));
    await cluster?.stop();
  });

  it('streams every answer through the picker', async () => {
    for (let i = 0; i < 3; i++) {
      const { data: stream, response } = await client.chat.completions
        .create({
          model: 'sim',
          stream: true,
          max_tokens: 8,
          messages: [{ role: 'user', content: `hello ${i}` }],
        })
        .withResponse();
      let chunks = 0;
      let finished = false;
      for await (const chunk of stream) {
        chunks++;
        if (chunk.choices[0]?.finish_reason != null) finished = true;
      }
      assert.ok(chunks > 1, 'streamed in chunks');
      assert.ok(finished, 'the stream ended with a finish_reason');
      assert.match(response.headers.get('x-sim-backend') ?? '', /^b[01]$/);
      assert.ok(response.headers.get(SERVED_HEADER), 'the stand-in names the endpoint');
    }
  });

  it('sends a repeated long prompt where its prefix went', async () => {
    const context = Array.from({ length: 200 }, (_, i) => `fact ${i} about the switchyard.`).join(
      ' ',
    );
    // Eight in a row: random tie-breaks among idle pods would land them all on one pod 1 time in 128.
    const backends: string[] = [];
    for (let i = 0; i < 8; i++) {
      const { response } = await client.chat.completions
        .create({
          model: 'sim',
          max_tokens: 4,
          messages: [
            { role: 'system', content: context },
            { role: 'user', content: `question ${i}` },
          ],
        })
        .withResponse();
      backends.push(response.headers.get('x-sim-backend') ?? '?');
    }
    assert.equal(
      new Set(backends).size,
      1,
      `one backend for the shared prefix: ${backends.join(', ')}`,
    );
  });

  it('answers 503, the EPP’s own immediate response, when no pod is ready', async () => {
    for (const name of ['sim-0', 'sim-1']) {
      const res = await cluster.request(
        'PATCH',
        `/api/v1/namespaces/${NAMESPACE}/pods/${name}/status`,
        { status: { conditions: [{ type: 'Ready', status: 'False' }] } },
      );
      assert.ok(res.status < 300, res.text);
    }
    const err = await waitFor('the picker to drop both pods', async () => {
      try {
        await client.chat.completions.create({
          model: 'sim',
          max_tokens: 4,
          messages: [{ role: 'user', content: 'anyone?' }],
        });
        return undefined;
      } catch (e) {
        return e;
      }
    });
    assert.ok(err instanceof OpenAI.APIError, String(err));
    assert.equal(err.status, 503);
    // The EPP's immediate response, passed on by the stand-in: its text, not an OpenAI error.
    assert.match(err.message, /failed to find endpoint candidates/);
  });
});
