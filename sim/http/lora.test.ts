/**
 * The simulator's LoRA surface over HTTP, as vLLM shows it: adapters in /v1/models with their
 * `parent`, 404 for a model it does not serve, `vllm:lora_requests_info` and the load counter in
 * /metrics, and the runtime load/unload endpoints behind their switch.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startSim } from '../server.ts';
import type { SimHandle } from '../server.ts';
import type { SimOptions } from '../options.ts';

async function withSim(options: Partial<SimOptions>, fn: (sim: SimHandle) => Promise<void>) {
  const sim = await startSim({ speed: 20, ...options });
  try {
    await fn(sim);
  } finally {
    await sim.close();
  }
}

const post = (url: string, body: unknown) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const complete = (sim: SimHandle, model: string) =>
  post(`${sim.url}/v1/completions`, { model, prompt: 'hello', max_tokens: 2 });

interface ModelEntry {
  id: string;
  parent: string | null;
  root: string;
}

void test('/v1/models lists the base model and each adapter with its parent', async () => {
  await withSim({ model: 'base', loras: 'sql,chat' }, async (sim) => {
    const list = (await (await fetch(`${sim.url}/v1/models`)).json()) as { data: ModelEntry[] };
    assert.deepEqual(
      list.data.map((m) => [m.id, m.parent]),
      [
        ['base', null],
        ['sql', 'base'],
        ['chat', 'base'],
      ],
    );
    const one = (await (await fetch(`${sim.url}/v1/models/sql`)).json()) as ModelEntry;
    assert.equal(one.parent, 'base');
  });
});

void test('adapters and the base are served; another model gets vLLM’s 404', async () => {
  await withSim({ model: 'base', loras: 'sql', loraLoadMs: 100 }, async (sim) => {
    assert.equal((await complete(sim, 'base')).status, 200);
    const res = await complete(sim, 'sql');
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { model: string }).model, 'sql');
    const missing = await complete(sim, 'other');
    assert.equal(missing.status, 404);
    const err = ((await missing.json()) as { error: { type: string; param: string } }).error;
    assert.equal(err.type, 'NotFoundError');
    assert.equal(err.param, 'model');
    assert.equal(sim.stats().loraAdapterLoads, 1);
    assert.deepEqual(sim.stats().residentAdapters, ['sql']);
  });
});

void test('the load cost delays the first request of an adapter, not the next', async () => {
  // 2000 simulated ms at speed 20: 100 ms of wall time.
  await withSim({ model: 'base', loras: 'sql', loraLoadMs: 2000 }, async (sim) => {
    let t0 = performance.now();
    assert.equal((await complete(sim, 'sql')).status, 200);
    const cold = performance.now() - t0;
    t0 = performance.now();
    assert.equal((await complete(sim, 'sql')).status, 200);
    const warm = performance.now() - t0;
    assert.ok(cold >= 95, `first request ${cold} ms`);
    assert.ok(warm < cold - 50, `second request ${warm} ms`);
  });
});

void test('/metrics: vllm:lora_requests_info as vLLM writes it, and the load counter', async () => {
  await withSim({ model: 'base', loras: 'a,b', maxLoras: 4, loraLoadMs: 0 }, async (sim) => {
    assert.equal((await complete(sim, 'a')).status, 200);
    const text = await (await fetch(`${sim.url}/metrics`)).text();
    assert.match(text, /^# TYPE vllm:lora_requests_info gauge$/m);
    const line = /^vllm:lora_requests_info\{(.*)\} (\S+)$/m.exec(text);
    assert.ok(line !== null, text);
    assert.equal(line[1], 'max_lora="4",running_lora_adapters="",waiting_lora_adapters=""');
    // The value is the time of the update, in prometheus_client's float format.
    assert.match(line[2]!, /^\d\.\d+e\+09$/);
    assert.ok(Math.abs(Number(line[2]) - Date.now() / 1000) < 60);
    assert.match(text, /^sim:lora_adapter_loads_total\{model_name="base"\} 1\.0$/m);
  });
  await withSim({ model: 'base' }, async (sim) => {
    const text = await (await fetch(`${sim.url}/metrics`)).text();
    assert.doesNotMatch(text, /lora/, 'no LoRA, no LoRA metrics');
  });
});

void test('running and waiting adapters show while requests hold them', async () => {
  await withSim(
    { model: 'base', loras: 'a,b', maxLoras: 1, loraLoadMs: 0, slots: 4, decodeMsPerToken: 200 },
    async (sim) => {
      const long = (model: string) =>
        post(`${sim.url}/v1/completions`, { model, prompt: 'x', max_tokens: 20 });
      const a = long('a');
      await new Promise((r) => setTimeout(r, 30));
      const b = long('b');
      await new Promise((r) => setTimeout(r, 30));
      const text = await (await fetch(`${sim.url}/metrics`)).text();
      assert.match(text, /running_lora_adapters="a",waiting_lora_adapters="b"/);
      assert.equal((await a).status, 200);
      assert.equal((await b).status, 200);
    },
  );
});

void test('runtime load and unload, only when allowed', async () => {
  await withSim({ model: 'base' }, async (sim) => {
    const res = await post(`${sim.url}/v1/load_lora_adapter`, { lora_name: 'x', lora_path: '/p' });
    assert.equal(res.status, 404);
    assert.deepEqual(await res.json(), { detail: 'Not Found' });
  });
  await withSim({ model: 'base', allowRuntimeLoraUpdating: true }, async (sim) => {
    assert.equal((await complete(sim, 'new')).status, 404);
    const load = await post(`${sim.url}/v1/load_lora_adapter`, {
      lora_name: 'new',
      lora_path: '/adapters/new',
    });
    assert.equal(load.status, 200);
    assert.match(await load.text(), /^Success: LoRA adapter 'new' added successfully\.$/);
    const again = await post(`${sim.url}/v1/load_lora_adapter`, {
      lora_name: 'new',
      lora_path: '/adapters/new',
    });
    assert.equal(again.status, 400);
    const missing = await post(`${sim.url}/v1/load_lora_adapter`, { lora_name: 'y' });
    assert.equal(missing.status, 400);
    const list = (await (await fetch(`${sim.url}/v1/models`)).json()) as { data: ModelEntry[] };
    assert.deepEqual(list.data[1], {
      ...list.data[1],
      id: 'new',
      parent: 'base',
      root: '/adapters/new',
    });
    assert.equal((await complete(sim, 'new')).status, 200);
    const unload = await post(`${sim.url}/v1/unload_lora_adapter`, { lora_name: 'new' });
    assert.equal(unload.status, 200);
    assert.equal((await complete(sim, 'new')).status, 404);
    const gone = await post(`${sim.url}/v1/unload_lora_adapter`, { lora_name: 'new' });
    assert.equal(gone.status, 404);
    assert.equal(((await gone.json()) as { error: { type: string } }).error.type, 'NotFoundError');
  });
});

void test('loras is validated, naming the field', async () => {
  await assert.rejects(startSim({ loras: 'a,,b' }), /loras/);
  await assert.rejects(startSim({ loras: 'a,a' }), /loras names a twice/);
});
