/**
 * LoRA adapters on a real engine: two vLLM servers (CPU) on the tiny Llama of make-model.py, one
 * started with a rank-8 adapter made at test time with PEFT (scripts/engine/make-adapter.py), one
 * without, and what vLLM itself answers about adapters: the facts discovery and the LoRA policy of
 * issue 42 build on (docs/engine.md, "LoRA adapters").
 *
 *   a: seed 1, serves `tiny` and the adapter `tiny-lora` (loaded at start)
 *   b: seed 1, serves `tiny`; LoRA enabled, no adapter at start
 *
 * Both run with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, so adapters can be loaded and unloaded
 * while they run. Like engine.test.ts, vLLM (and PEFT) are installed on first use and
 * SWITCHYARD_ENGINE_TESTS=0 skips this file unless vLLM is already installed.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI, { APIError } from 'openai';
import { startSidecar, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { eventually } from '../helpers.ts';
import { engineInstalled, engineVenv, tinyModel } from '../../harness/engine/install.ts';
import {
  loadAdapter,
  loraRequestsInfo,
  startVllmWithAdapters,
  tinyAdapter,
  unloadAdapter,
  type Adapter,
} from '../../harness/engine/lora.ts';
import { stopVllms, type VllmServer } from '../../harness/engine/vllm.ts';

const ENABLED = process.env['SWITCHYARD_ENGINE_TESTS'] !== '0' || engineInstalled();
const SKIP = ENABLED
  ? false
  : 'SWITCHYARD_ENGINE_TESTS=0 and vLLM is not installed (bash scripts/engine/install.sh installs it)';
/** A cold install (12 min), the model and adapter, and two server starts on a busy machine. */
const SETUP_TIMEOUT_MS = 40 * 60_000;
const BASE = 'tiny';
const ADAPTER = 'tiny-lora';
const HELLO = [{ role: 'user' as const, content: 'hello there' }];

const clientFor = (url: string): OpenAI =>
  new OpenAI({ baseURL: `${url}/v1`, apiKey: 'client-key', maxRetries: 0, timeout: 120_000 });

interface VllmModel {
  id: string;
  object: string;
  owned_by: string;
  root: string;
  parent: string | null;
}

async function modelsOf(url: string): Promise<VllmModel[]> {
  const res = await fetch(`${url}/v1/models`);
  assert.equal(res.status, 200);
  return ((await res.json()) as { data: VllmModel[] }).data;
}

/** The greedy answer of `model` on `url` (8 tokens of "hello there"). */
async function greedy(url: string, model: string): Promise<string> {
  const answer = await clientFor(url).chat.completions.create({
    model,
    messages: HELLO,
    max_tokens: 8,
    temperature: 0,
  });
  assert.equal(answer.model, model);
  return answer.choices[0]?.message.content ?? '';
}

describe('vLLM with LoRA adapters', { skip: SKIP }, () => {
  let dir = '';
  let a: VllmServer | undefined;
  let b: VllmServer | undefined;
  let adapter: Adapter;

  before(
    async () => {
      dir = await mkdtemp(join(tmpdir(), 'switchyard-engine-lora-'));
      const venv = await engineVenv();
      const [model, adapterPath] = await Promise.all([tinyModel(1), tinyAdapter(1, 1)]);
      adapter = { name: ADAPTER, path: adapterPath };
      const log = (name: string): string => join(dir, `vllm-${name}.log`);
      const common = { venv, model, servedName: BASE, runtimeUpdates: true };
      [a, b] = await Promise.all([
        startVllmWithAdapters({ ...common, logFile: log('a'), adapters: [adapter] }),
        startVllmWithAdapters({ ...common, logFile: log('b'), adapters: [] }),
      ]);
      for (const [name, server] of [
        ['a', a],
        ['b', b],
      ] as const) {
        const memory = await server.memory();
        process.stderr.write(
          `[engine-lora] vLLM ${name} ready in ${(server.startupMs / 1000).toFixed(1)} s: ` +
            `${memory.processes} processes, RSS ${Math.round(memory.rssBytes / 2 ** 20)} MiB, ` +
            `PSS ${Math.round(memory.pssBytes / 2 ** 20)} MiB\n`,
        );
      }
    },
    { timeout: SETUP_TIMEOUT_MS },
  );

  after(async () => {
    await stopVllms([a, b]);
    if (dir !== '' && process.env['SWITCHYARD_ENGINE_KEEP'] !== '1')
      await rm(dir, { recursive: true, force: true });
    else if (dir !== '') process.stderr.write(`[engine-lora] logs kept in ${dir}\n`);
  });

  // What discovery (GET /v1/models every 5 s) and the LoRA policy read from vLLM: a vLLM upgrade
  // that changes one of these fails here first.
  describe('what vLLM serves with LoRA on CPU (docs/engine.md)', () => {
    test('/v1/models lists the adapter with parent = the base model, only where it is loaded', async () => {
      const onA = await modelsOf(a!.url);
      assert.deepEqual(
        onA.map((m) => [m.id, m.parent]),
        [
          [BASE, null],
          [ADAPTER, BASE],
        ],
      );
      const listed = onA.find((m) => m.id === ADAPTER)!;
      assert.equal(listed.object, 'model');
      assert.equal(listed.owned_by, 'vllm');
      assert.equal(listed.root, adapter.path);
      assert.deepEqual(
        (await modelsOf(b!.url)).map((m) => [m.id, m.parent]),
        [[BASE, null]],
      );
    });

    test('a request for the adapter is served where it is loaded, with its own answer; 404 elsewhere', async () => {
      const base = await greedy(a!.url, BASE);
      const adapted = await greedy(a!.url, ADAPTER);
      // Same weights and seed on b: the base answers alike; the adapter really changes the model.
      assert.equal(await greedy(b!.url, BASE), base);
      assert.notEqual(adapted, base);
      assert.equal(await greedy(a!.url, ADAPTER), adapted);
      await assert.rejects(greedy(b!.url, ADAPTER), (err: unknown) => {
        assert.ok(err instanceof APIError, String(err));
        assert.equal(err.status, 404);
        assert.equal(err.type, 'NotFoundError');
        assert.equal(err.param, 'model');
        assert.match(err.message, /The model `tiny-lora` does not exist\. Valid aliases: tiny\.$/);
        return true;
      });
    });

    test('/metrics: vllm:lora_requests_info names the adapter while a request for it runs', async () => {
      const metrics = async (): Promise<string> => (await fetch(`${a!.url}/metrics`)).text();
      assert.match(await metrics(), /^# TYPE vllm:lora_requests_info gauge$/m);
      const abort = new AbortController();
      const stream = await clientFor(a!.url).chat.completions.create(
        { model: ADAPTER, messages: HELLO, max_tokens: 1_500, stream: true },
        { signal: abort.signal },
      );
      const reading = (async () => {
        try {
          for await (const _ of stream);
        } catch {
          // aborted below
        }
      })();
      try {
        await eventually(
          async () => loraRequestsInfo(await metrics())?.running.includes(ADAPTER) === true,
          20_000,
          'tiny-lora among running_lora_adapters',
        );
        const info = loraRequestsInfo(await metrics())!;
        assert.equal(info.maxLora, 2);
        // vLLM fills both labels with every adapter that has a request in either state (the keys
        // of one per-adapter table), so a running adapter is in `waiting_lora_adapters` too.
        assert.deepEqual(info.running, [ADAPTER]);
        assert.deepEqual(info.waiting, [ADAPTER]);
        assert.ok(info.timestamp > Date.now() / 1000 - 3_600, String(info.timestamp));
      } finally {
        abort.abort();
        await reading;
      }
      await eventually(
        async () => loraRequestsInfo(await metrics())?.running.length === 0,
        20_000,
        'no running adapter once the request ended',
      );
      // The series of earlier states stay, with older timestamps: the newest is the current one.
      const series = (await metrics())
        .split('\n')
        .filter((line) => line.startsWith('vllm:lora_requests_info{'));
      assert.ok(
        series.some((line) => line.includes(`running_lora_adapters="${ADAPTER}"`)),
        series.join('\n'),
      );
    });

    test('runtime loading: load_lora_adapter lists and serves an adapter at once; unload removes it', async () => {
      const extra = { name: 'tiny-lora-runtime', path: adapter.path };
      const loaded = await loadAdapter(b!, extra);
      assert.equal(loaded.status, 200, loaded.text);
      assert.deepEqual(
        (await modelsOf(b!.url)).map((m) => [m.id, m.parent]),
        [
          [BASE, null],
          [extra.name, BASE],
        ],
      );
      // The same weights under another name: the same answer as on a.
      assert.equal(await greedy(b!.url, extra.name), await greedy(a!.url, ADAPTER));
      const again = await loadAdapter(b!, extra);
      assert.equal(again.status, 400, again.text);
      const unloaded = await unloadAdapter(b!, extra.name);
      assert.equal(unloaded.status, 200, unloaded.text);
      assert.deepEqual(
        (await modelsOf(b!.url)).map((m) => m.id),
        [BASE],
      );
      await assert.rejects(greedy(b!.url, extra.name), (err: unknown) => {
        assert.ok(err instanceof APIError && err.status === 404, String(err));
        return true;
      });
    });
  });

  // Issue 42's routing by model, with vLLM's own adapter surface: needs the candidate filter
  // (sidecar/policy), the sidecar's model-aware shell and /v1/models, and discovery
  // (sidecar/proxy/model-discovery.ts). Run alone after they are merged:
  //   node --test --test-name-pattern='routing by model' test/engine/lora.test.ts
  describe('routing by model through a sidecar (issue 42)', () => {
    const sidecars: RunningProcess[] = [];
    after(() => stopAll(sidecars));

    /** Writes a Balance pool of a and b and starts a sidecar on it (stopped in `after`). */
    const sidecarOn = async (
      name: string,
      modelsOfA: string | undefined,
      modelsOfB: string | undefined,
    ): Promise<RunningProcess> => {
      const backend = (id: string, server: VllmServer, models: string | undefined): string =>
        `  - {name: ${id}, url: '${server.url}/v1'${models === undefined ? '' : `, models: ${models}`}}`;
      const file = join(dir, `${name}.yaml`);
      await writeFile(
        file,
        [
          'apiVersion: switchyard.dev/v1alpha1',
          'kind: InferencePool',
          `metadata: {name: ${name}}`,
          'spec:',
          '  mode: Balance',
          '  affinity: {key: None}',
          '  backends:',
          backend('a', a!, modelsOfA),
          backend('b', b!, modelsOfB),
          '',
        ].join('\n'),
      );
      // One pool: discovery is off by default (auto) unless models are declared; the discovered
      // case turns it on as a user of a LoRA fleet that declares nothing does.
      const discover = modelsOfA === undefined && modelsOfB === undefined;
      const started = await startSidecar(file, discover ? ['--model-discovery', 'on'] : []);
      sidecars.push(started);
      return started;
    };

    /** Sends a greedy chat for `model` through `proxy`; resolves with the backend that answered. */
    const via = async (
      proxy: RunningProcess,
      model: string,
    ): Promise<{ backend: string; content: string }> => {
      const { data, response } = await clientFor(proxy.url)
        .chat.completions.create({ model, messages: HELLO, max_tokens: 8, temperature: 0 })
        .withResponse();
      // `<backend>/<endpoint>`, with `; model=<name>` after it when the name was rewritten.
      const backend = (response.headers.get('x-switchyard-backend') ?? '').split('/')[0]!;
      return { backend, content: data.choices[0]?.message.content ?? '' };
    };

    /** The adapter reaches only `expected`; the base model reaches both a and b. */
    const assertRouted = async (proxy: RunningProcess, expected: string): Promise<void> => {
      const adapted = await greedy(expected === 'a' ? a!.url : b!.url, ADAPTER);
      for (let i = 0; i < 8; i++) {
        const answer = await via(proxy, ADAPTER);
        assert.equal(answer.backend, expected, `request ${i} for ${ADAPTER}`);
        assert.equal(answer.content, adapted);
      }
      const seen = new Set<string>();
      for (let round = 0; round < 6 && seen.size < 2; round++) {
        const answers = await Promise.all([1, 2, 3, 4].map(() => via(proxy, BASE)));
        for (const answer of answers) seen.add(answer.backend);
      }
      assert.deepEqual([...seen].sort(), ['a', 'b']);
    };

    /** The sidecar's 404 for a model nobody serves, naming the served ones. */
    const notServed = async (proxy: RunningProcess): Promise<Record<string, unknown>> => {
      const res = await fetch(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'no-such-model', messages: HELLO, max_tokens: 1 }),
      });
      const text = await res.text();
      assert.equal(res.status, 404, text);
      return (JSON.parse(text) as { error: Record<string, unknown> }).error;
    };

    test('declared: backends[].models naming the base and the adapter', async () => {
      const proxy = await sidecarOn('declared', `[${BASE}, ${ADAPTER}]`, `[${BASE}]`);
      await assertRouted(proxy, 'a');
      const listed = [];
      for await (const model of clientFor(proxy.url).models.list()) listed.push(model.id);
      assert.deepEqual(listed.sort(), [BASE, ADAPTER]);
      const error = await notServed(proxy);
      assert.equal(error['code'], 'model_not_found');
      assert.equal(error['type'], 'invalid_request_error');
      assert.equal(error['param'], 'model');
      assert.match(String(error['message']), /`no-such-model`/);
      assert.match(String(error['message']), /tiny-lora/);
    });

    let discovered: RunningProcess;
    test('discovered: nothing declared, the sidecar learns each server’s list from /v1/models', async () => {
      discovered = await sidecarOn('discovered', undefined, undefined);
      // Until both lists are known an unknown model may go to either server (vLLM's own 404);
      // the sidecar's model_not_found says both are known.
      await eventually(
        async () =>
          (await notServed(discovered).catch(() => undefined))?.['code'] === 'model_not_found',
        30_000,
        'both servers’ model lists discovered',
      );
      await assertRouted(discovered, 'a');
      const listed: VllmModel[] = [];
      for await (const model of clientFor(discovered.url).models.list())
        listed.push(model as unknown as VllmModel);
      assert.deepEqual(listed.map((m) => m.id).sort(), [BASE, ADAPTER]);
      assert.equal(listed.find((m) => m.id === ADAPTER)?.parent, BASE);
    });

    test('runtime loading: the adapter moved from a to b at runtime is followed within seconds', async () => {
      const loaded = await loadAdapter(b!, adapter);
      assert.equal(loaded.status, 200, loaded.text);
      const unloaded = await unloadAdapter(a!, ADAPTER);
      assert.equal(unloaded.status, 200, unloaded.text);
      const moved = performance.now();
      // Discovery polls every 5 s: until it has, a request may still go to a (vLLM's 404).
      await eventually(
        async () => {
          const answer = await via(discovered, ADAPTER).catch(() => undefined);
          if (answer === undefined) await sleep(250); // not a stream of 404s at a
          return answer?.backend === 'b';
        },
        20_000,
        'a request for tiny-lora answered by b',
      );
      const seconds = (performance.now() - moved) / 1000;
      process.stderr.write(
        `[engine-lora] the moved adapter was used on b after ${seconds.toFixed(1)} s\n`,
      );
      assert.ok(seconds <= 15, `${seconds} s`);
      // b answering means its new list is known; one more discovery round (5 s) for a's, which
      // lost the adapter, and from then on every request for it goes to b.
      await sleep(6_000);
      await assertRouted(discovered, 'b');
    });
  });
});
