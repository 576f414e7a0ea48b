/**
 * The `gaie-epp` peer end to end: GAIE's picker (lwepp) on the harness's kube-apiserver, the
 * ext_proc stand-in for Envoy in front, two real simulators behind, the official `openai` client
 * in front. Checks what the bench relies on: streamed answers arrive through the EPP's response
 * phases, the picker's choice (round-robin) is where the request goes, and a pool with no ready
 * pod is a 503 with an OpenAI-style error. Skipped when scripts/gaie/build-epp.sh has not run
 * (a cold build takes minutes; the bench never builds).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { startSwitchyard, type RunningProcess } from '../../harness/processes.ts';
import { NAMESPACE, startGaieEpp, unavailable } from '../../bench/routing/gaie.ts';
import type { RouterSet } from '../../bench/routing/policy-definition.ts';

const missing = unavailable();

describe('gaie-epp: GAIE’s picker behind the ext_proc stand-in', { skip: missing }, () => {
  let cluster: Cluster;
  let sims: RunningProcess[] = [];
  let epp: RouterSet;
  let client: OpenAI;

  before(async () => {
    [cluster, ...sims] = await Promise.all([
      startCluster(),
      startSwitchyard(['sim', '--port', '0', '--name', 'b0']),
      startSwitchyard(['sim', '--port', '0', '--name', 'b1']),
    ]);
    epp = await startGaieEpp(cluster, {
      backends: sims.map((s, i) => ({ name: `b${i}`, url: s.url, costPerMTok: 1 })),
    });
    client = new OpenAI({ baseURL: `${epp.urls[0]}/v1`, apiKey: 'none', maxRetries: 0 });
  });

  after(async () => {
    await epp?.stop();
    await Promise.all(sims.map((s) => s.stop()));
    await cluster?.stop();
  });

  it('streams every answer, alternating between the two backends', async () => {
    const backends: string[] = [];
    for (let i = 0; i < 4; i++) {
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
      backends.push(response.headers.get('x-sim-backend') ?? '?');
    }
    assert.deepEqual(new Set(backends), new Set(['b0', 'b1']));
    for (let i = 1; i < backends.length; i++) assert.notEqual(backends[i], backends[i - 1]);
  });

  it('answers 503 with an OpenAI-style error when no pod is ready', async () => {
    for (const name of ['sim-0', 'sim-1']) {
      const res = await cluster.request(
        'PATCH',
        `/api/v1/namespaces/${NAMESPACE}/pods/${name}/status`,
        {
          status: { conditions: [{ type: 'Ready', status: 'False' }] },
        },
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
    assert.match(err.message, /endpoint picker/);
  });
});
