/**
 * `GET /v1/models` through a standalone sidecar whose pool declares no `models`: the union of what
 * the backends (real simulator processes, each serving one model as vLLM does) list, with the
 * official `openai` client. A pool that declares `models` still answers that list itself.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { startSim, stopAll, type RunningProcess } from '../../harness/processes.ts';

const SIM_KEY = 'sim-secret-key';

/** A pool file with these backend lines (`- {…}`) and `extra` spec lines. */
const poolYaml = (backends: string[], extra: string[] = []): string =>
  [
    'apiVersion: switchyard.dev/v1alpha1',
    'kind: InferencePool',
    'metadata: {name: test}',
    'spec:',
    '  backends:',
    ...backends.map((b) => `  - ${b}`),
    ...extra.map((l) => `  ${l}`),
    '',
  ].join('\n');

/** A loopback URL nothing listens on (a port that was free a moment ago). */
async function deadUrl(): Promise<string> {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return `http://127.0.0.1:${port}/v1`;
}

const clientOf = (sidecar: RunningProcess): OpenAI =>
  new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'client-key', maxRetries: 0 });

interface ErrorBody {
  error: { code: string; message: string; type: string };
}

describe('/v1/models through the sidecar', () => {
  /** llama (1,000 tokens), qwen, llama again (2,000 tokens), and a model behind an API key. */
  const sims: Record<'llama' | 'qwen' | 'llama2k' | 'keyed', RunningProcess | undefined> = {
    llama: undefined,
    qwen: undefined,
    llama2k: undefined,
    keyed: undefined,
  };
  const url = (name: keyof typeof sims): string => `${(sims[name] as RunningProcess).url}/v1`;
  const running: SidecarOnPool[] = [];

  before(async () => {
    [sims.llama, sims.qwen, sims.llama2k, sims.keyed] = await Promise.all([
      startSim('llama', ['--model', 'llama', '--max-model-len', '1000']),
      startSim('qwen', ['--model', 'qwen']),
      startSim('llama2k', ['--model', 'llama', '--max-model-len', '2000']),
      startSim('keyed', ['--model', 'keyed', '--api-key', SIM_KEY]),
    ]);
  });
  after(async () => {
    await Promise.all(running.map((s) => s.stop().catch(() => undefined)));
    await stopAll(Object.values(sims));
  });

  const sidecar = async (yaml: string): Promise<RunningProcess> => {
    const started = await sidecarOn(yaml, [], { SIM_KEY });
    running.push(started);
    return started.sidecar;
  };

  describe('a pool without a declared list', () => {
    let union: RunningProcess;
    before(async () => {
      union = await sidecar(
        poolYaml([
          `{name: first, url: '${url('llama')}'}`,
          `{name: second, url: '${url('qwen')}'}`,
          `{name: third, url: '${url('llama2k')}'}`,
          `{name: keyed, url: '${url('keyed')}', apiKeyEnv: SIM_KEY}`,
        ]),
      );
    });

    test('lists every backend’s models once, the first backend in pool order winning a duplicate', async () => {
      const models = await clientOf(union).models.list();
      assert.deepEqual(
        models.data.map((m) => m.id),
        ['llama', 'qwen', 'keyed'],
      );
      const llama = models.data[0] as unknown as Record<string, unknown>;
      // As the first backend sent it: vLLM's own fields kept, its context length not the third's.
      assert.equal(llama['max_model_len'], 1000);
      assert.equal(llama['owned_by'], 'vllm');
      assert.equal(llama['root'], 'llama');
      assert.ok(Array.isArray(llama['permission']));
    });

    test('a backend with an API key is asked with it (it lists nothing without)', async () => {
      const res = await fetch(`${union.url}/v1/models`);
      assert.equal(res.status, 200);
      const body = (await res.json()) as { object: string; data: { id: string }[] };
      assert.equal(body.object, 'list');
      assert.ok(
        body.data.some((m) => m.id === 'keyed'),
        'the keyed simulator answered the sidecar',
      );
      const unkeyed = await fetch(`${url('keyed')}/models`);
      assert.equal(unkeyed.status, 401, 'the keyed simulator does refuse a request without it');
      await unkeyed.body?.cancel();
    });

    test('a backend that is down is left out; the others still answer 200', async () => {
      await (sims.qwen as RunningProcess).stop();
      const models = await clientOf(union).models.list();
      assert.deepEqual(
        models.data.map((m) => m.id),
        ['llama', 'keyed'],
      );
    });
  });

  test('a backend that rewrites the model does not show its own names', async () => {
    const mixed = await sidecar(
      poolYaml([
        `{name: own, url: '${url('llama2k')}'}`,
        `{name: provider, url: '${url('keyed')}', apiKeyEnv: SIM_KEY, model: keyed}`,
      ]),
    );
    const models = await clientOf(mixed).models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      ['llama'],
    );
  });

  test('a pool that declares models answers that list itself, as before', async () => {
    const declared = await sidecar(
      poolYaml([`{name: first, url: '${url('llama')}'}`], ['models: [alpha, beta]']),
    );
    const res = await fetch(`${declared.url}/v1/models`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {
      object: 'list',
      data: [
        { id: 'alpha', object: 'model', created: 0, owned_by: 'switchyard:test' },
        { id: 'beta', object: 'model', created: 0, owned_by: 'switchyard:test' },
      ],
    });
  });

  test('every backend down: a 502 in OpenAI shape saying no backend answered', async () => {
    const down = await sidecar(
      poolYaml([
        `{name: gone, url: '${await deadUrl()}'}`,
        `{name: also, url: '${await deadUrl()}'}`,
      ]),
    );
    const res = await fetch(`${down.url}/v1/models`);
    assert.equal(res.status, 502);
    const body = (await res.json()) as ErrorBody;
    assert.equal(body.error.code, 'upstream_unreachable');
    assert.equal(body.error.type, 'upstream_error');
    assert.match(body.error.message, /No backend of pool test answered \/v1\/models/);
    assert.match(body.error.message, /gone\/127\.0\.0\.1:\d+: ECONNREFUSED/);
    await assert.rejects(clientOf(down).models.list(), (err: unknown) => {
      assert.ok(err instanceof OpenAI.APIError);
      assert.equal(err.status, 502);
      return true;
    });
  });
});
