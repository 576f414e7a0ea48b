/**
 * A sidecar that follows several pools and routes each request by its model (issue 42): through
 * the `switchyard sidecar` command on two pool files with simulators behind them, and in process
 * with small echo servers for what pool files cannot say yet (aliases), all with the openai client.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI, { toFile } from 'openai';
import pino from 'pino';
import {
  SPAN_KIND_SERVER,
  startOtlpReceiver,
  type OtlpReceiver,
} from '../../harness/otlp-receiver.ts';
import { balancePool, scratchDir } from '../../harness/pool-file.ts';
import {
  startSidecar,
  startSim,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { listen } from '../../lib/listen.ts';
import { ActivePoolState, type ActivePool } from '../../sidecar/config/active-pool.ts';
import { loadPoolText } from '../../sidecar/config/pool-file.ts';
import type { PickResult } from '../../sidecar/policy/index.ts';
import { SidecarMetrics } from '../../sidecar/proxy/metrics.ts';
import { SidecarProxy, type PoolSlot } from '../../sidecar/proxy/proxy-server.ts';

/** The YAML of a pool named `name` whose backends are `urls`, with `extra` spec lines. */
const poolYaml = (name: string, urls: string[], extra: string, backends: string[]): string =>
  balancePool(urls, extra, backends).replace('metadata: {name: test}', `metadata: {name: ${name}}`);

interface OpenAIError {
  status: number;
  error: { code: string; param: string | null; message: string; type: string };
}

describe('several pool files: routing by model through the sidecar command', () => {
  const processes: RunningProcess[] = [];
  let sidecar: RunningProcess;
  let client: OpenAI;
  let cleanup: () => Promise<void>;

  before(async () => {
    const scratch = await scratchDir();
    cleanup = scratch.cleanup;
    // Each serves only its model, which is what model discovery reads from its /v1/models.
    const chatSim = await startSim('chat-sim', ['--model', 'chat-model']);
    processes.push(chatSim);
    const embedSim = await startSim('embed-sim', ['--model', 'embed-model']);
    processes.push(embedSim);
    // A directory of pool files: read in name order, so `1-chat` is the first (default) pool.
    const pools = join(scratch.dir, 'pools');
    await mkdir(pools);
    await writeFile(
      join(pools, '1-chat.yaml'),
      poolYaml('chat', [chatSim.url], '  models: [chat-model]', ['chatty']),
    );
    await writeFile(
      join(pools, '2-embed.yaml'),
      poolYaml('embed', [embedSim.url], '  models: [embed-model]', ['embedder']),
    );
    await writeFile(join(pools, 'README.md'), 'not a pool file');
    sidecar = await startSidecar(pools);
    processes.push(sidecar);
    client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'k', maxRetries: 0 });
  });
  after(async () => {
    await stopAll(processes);
    await cleanup();
  });

  test('a chat model goes to the chat pool, an embedding model to the embedding pool', async () => {
    const chat = await client.chat.completions
      .create({ model: 'chat-model', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    assert.match(chat.response.headers.get('x-switchyard-backend') ?? '', /^chatty\//);
    const embed = await client.embeddings
      .create({ model: 'embed-model', input: 'hello' })
      .withResponse();
    assert.match(embed.response.headers.get('x-switchyard-backend') ?? '', /^embedder\//);
    assert.ok(embed.data.data[0]!.embedding.length > 0);
  });

  test('a model no pool serves gets a 404 model_not_found listing the served models', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: 'gpt-nope',
        messages: [{ role: 'user', content: 'hi' }],
      }),
      (err: unknown) => {
        assert.ok(err instanceof OpenAI.NotFoundError);
        const e = err as unknown as OpenAIError;
        assert.equal(e.error.code, 'model_not_found');
        assert.equal(e.error.param, 'model');
        assert.equal(e.error.type, 'invalid_request_error');
        assert.equal(
          e.error.message,
          'The model `gpt-nope` is not served here. Served models: chat-model, embed-model.',
        );
        return true;
      },
    );
  });

  test('/v1/models lists the models of both pools', async () => {
    const models = await client.models.list();
    assert.deepEqual(
      models.data.map((m) => [m.id, m.owned_by]),
      [
        ['chat-model', 'switchyard:chat'],
        ['embed-model', 'switchyard:embed'],
      ],
    );
  });

  test('the admin port: ready with both pools, backends and metrics per pool', async () => {
    const ready = (await (await fetch(`${sidecar.adminUrl}/readyz`)).json()) as {
      status: string;
      pools: { pool: string }[];
    };
    assert.equal(ready.status, 'ready');
    assert.deepEqual(
      ready.pools.map((p) => p.pool),
      ['chat', 'embed'],
    );
    const first = (await (await fetch(`${sidecar.adminUrl}/debug/backends`)).json()) as {
      pool: string;
    };
    assert.equal(first.pool, 'chat');
    const embed = (await (await fetch(`${sidecar.adminUrl}/debug/backends?pool=embed`)).json()) as {
      pool: string;
      endpoints: { backend: string }[];
    };
    assert.equal(embed.pool, 'embed');
    assert.deepEqual(
      embed.endpoints.map((e) => e.backend),
      ['embedder'],
    );
    assert.equal((await fetch(`${sidecar.adminUrl}/debug/backends?pool=nope`)).status, 404);
    const metrics = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
    assert.match(
      metrics,
      /switchyard_requests_total\{pool="chat",backend="chatty",[^}]*code="2xx"\} 1/,
    );
    assert.match(
      metrics,
      /switchyard_requests_total\{pool="embed",backend="embedder",[^}]*code="2xx"\} 1/,
    );
    assert.match(metrics, /switchyard_responses_total\{pool="chat",code="404"\} 1/);
    assert.match(metrics, /switchyard_inflight\{pool="embed",backend="embedder"/);
  });
});

describe('aliases and declared models in pool files, through the sidecar command', () => {
  const processes: RunningProcess[] = [];
  let client: OpenAI;
  let cleanup: () => Promise<void>;
  let receiver: OtlpReceiver;

  before(async () => {
    receiver = await startOtlpReceiver();
    const scratch = await scratchDir();
    cleanup = scratch.cleanup;
    const sim = await startSim('chat-sim', ['--model', 'llama-3.1-8b-instruct']);
    processes.push(sim);
    const embedSim = await startSim('embed-sim', ['--model', 'bge-small']);
    processes.push(embedSim);
    const chat = join(scratch.dir, 'chat.yaml');
    await writeFile(
      chat,
      [
        'apiVersion: switchyard.dev/v1alpha1',
        'kind: InferencePool',
        'metadata: {name: chat}',
        'spec:',
        '  mode: Balance',
        '  aliases: [{name: gpt-4o-mini, model: llama-3.1-8b-instruct}]',
        '  backends:',
        `  - {name: chatty, url: ${sim.url}/v1, models: [llama-3.1-8b-instruct]}`,
        '',
      ].join('\n'),
    );
    const embed = join(scratch.dir, 'embed.yaml');
    await writeFile(
      embed,
      poolYaml('embed', [embedSim.url], '  models: [bge-small]', ['embedder']),
    );
    const sidecar = await startSidecar(chat, ['--pool-file', embed], {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    processes.push(sidecar);
    client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'k', maxRetries: 0 });
  });
  after(async () => {
    await stopAll(processes);
    await receiver.close();
    await cleanup();
  });

  test('an alias from spec.aliases is sent as its model; the header and the span say so', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4242';
    const { data, response } = await client.chat.completions
      .create(
        { model: 'gpt-4o-mini', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] },
        { headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } },
      )
      .withResponse();
    const spans = await receiver.waitForTrace(traceId, (all) =>
      all.some((s) => s.kind === SPAN_KIND_SERVER),
    );
    const server = spans.find((s) => s.kind === SPAN_KIND_SERVER)!;
    assert.equal(server.attributes['switchyard.pool'], 'chat');
    assert.equal(server.attributes['switchyard.model.requested'], 'gpt-4o-mini');
    assert.equal(server.attributes['switchyard.model.resolved'], 'llama-3.1-8b-instruct');
    assert.equal(data.model, 'llama-3.1-8b-instruct');
    assert.match(
      response.headers.get('x-switchyard-backend') ?? '',
      /^chatty\/127\.0\.0\.1:\d+; model=llama-3\.1-8b-instruct$/,
    );
  });

  test('the second pool file takes its declared model; /v1/models lists both pools', async () => {
    const embed = await client.embeddings.create({ model: 'bge-small', input: 'x' }).withResponse();
    assert.match(embed.response.headers.get('x-switchyard-backend') ?? '', /^embedder\//);
    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    assert.ok(ids.includes('gpt-4o-mini') && ids.includes('bge-small'), ids.join(', '));
  });
});

test('two pool files of one pool, or --pool with pool files, are refused at start', async () => {
  const { dir, cleanup } = await scratchDir();
  try {
    const a = join(dir, 'a.yaml');
    const b = join(dir, 'b.yaml');
    await writeFile(a, poolYaml('chat', ['http://127.0.0.1:9'], '', ['x']));
    await writeFile(b, poolYaml('chat', ['http://127.0.0.1:9'], '', ['y']));
    const base = ['sidecar', '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0'];
    await assert.rejects(
      startSwitchyard([...base, '--pool-file', a, '--pool-file', b]),
      (err: Error) => {
        assert.match(err.message, /exited \(2\)/);
        assert.match(err.message, /pool chat is named by more than one pool file/);
        return true;
      },
    );
    await assert.rejects(
      startSwitchyard([...base, '--pool-file', a, '--pool', 'chat']),
      (err: Error) => {
        assert.match(err.message, /--pool is for --controller/);
        return true;
      },
    );
    const empty = join(dir, 'empty');
    await mkdir(empty);
    await assert.rejects(startSwitchyard([...base, '--pool-file', empty]), (err: Error) => {
      assert.match(err.message, /a pool-file directory with no \*\.yaml/);
      return true;
    });
  } finally {
    await cleanup();
  }
});

/** What an echo server was sent: the model of each request, as it arrived. */
interface EchoServer {
  url: string;
  models: string[];
  close(): Promise<void>;
}

/**
 * A model server that answers chat, embeddings and transcriptions with the model it was sent
 * (a transcription's multipart form parsed by undici, so a wrong length or a broken form fails).
 */
async function echoServer(name: string): Promise<EchoServer> {
  const models: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const raw = Buffer.concat(chunks);
        let model: string;
        if (req.url === '/v1/audio/transcriptions') {
          const form = await new Request('http://x/', {
            method: 'POST',
            headers: { 'content-type': req.headers['content-type'] ?? '' },
            body: raw,
          }).formData();
          const field = form.get('model');
          model = typeof field === 'string' ? field : '(a file)';
        } else {
          model = String((JSON.parse(raw.toString() || '{}') as { model?: unknown }).model);
        }
        models.push(model);
        const answer =
          req.url === '/v1/embeddings'
            ? {
                object: 'list',
                model,
                data: [{ object: 'embedding', index: 0, embedding: [0.5] }],
                usage: { prompt_tokens: 1, total_tokens: 1 },
              }
            : req.url === '/v1/audio/transcriptions'
              ? { text: `${name} heard ${model}` }
              : {
                  id: 'c',
                  object: 'chat.completion',
                  created: 0,
                  model,
                  choices: [
                    {
                      index: 0,
                      message: { role: 'assistant', content: name },
                      finish_reason: 'stop',
                    },
                  ],
                  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
                };
        const body = JSON.stringify(answer);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(body);
      })();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    models,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A pool's configuration in force, from pool file YAML and the policy fields added to it. */
function activePool(yaml: string, policy: Partial<ActivePool['policy']> = {}): ActivePoolState {
  const loaded = loadPoolText(yaml, {});
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
  const state = new ActivePoolState({
    clock: { nowMs: () => performance.now() },
    rng: { next: () => Math.random() },
    logger: pino({ level: 'silent' }),
  });
  state.apply({ ...loaded.pool, policy: { ...loaded.pool.policy, ...policy } });
  return state;
}

describe('several pools in process: aliases, the default pool, uploads', () => {
  let chatServer: EchoServer;
  let embedServer: EchoServer;
  let proxy: SidecarProxy;
  let client: OpenAI;
  let baseUrl: string;
  let slots: PoolSlot[];

  before(async () => {
    chatServer = await echoServer('chat');
    embedServer = await echoServer('embed');
    const chat = activePool(poolYaml('chat', [chatServer.url], '', ['chatty']), {
      aliases: [
        { name: 'gpt-4o-mini', model: 'llama-3.1-8b-instruct' },
        { name: 'whisper-alias', model: 'whisper-1' },
      ],
    });
    const embed = activePool(
      poolYaml('embed', [embedServer.url], '  models: [bge-small]', ['embedder']),
      { aliases: [{ name: 'text-embedding-3-small', model: 'bge-small' }] },
    );
    const first = new SidecarMetrics('chat');
    slots = [
      { name: 'chat', current: chat.current(), metrics: first },
      { name: 'embed', current: embed.current(), metrics: new SidecarMetrics('embed', first) },
    ];
    proxy = new SidecarProxy({
      pool: () => slots[0]!.current,
      pools: () => slots,
      metrics: first,
      logger: pino({ level: 'silent' }),
      maxBodyBytes: 1024 * 1024,
      nowMs: () => performance.now(),
      isDraining: () => false,
    });
    baseUrl = await listen(proxy.server, { host: '127.0.0.1', port: 0 });
    client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'k', maxRetries: 0 });
  });
  after(async () => {
    proxy.server.closeAllConnections();
    await new Promise<void>((r) => proxy.server.close(() => r()));
    proxy.close();
    await chatServer.close();
    await embedServer.close();
  });

  test('an alias is sent as the model it stands for, and the header says so', async () => {
    const { data, response } = await client.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    assert.equal(chatServer.models.at(-1), 'llama-3.1-8b-instruct');
    assert.equal(data.model, 'llama-3.1-8b-instruct');
    assert.match(
      response.headers.get('x-switchyard-backend') ?? '',
      /^chatty\/127\.0\.0\.1:\d+; model=llama-3\.1-8b-instruct$/,
    );
  });

  test('an alias of the second pool takes the request there', async () => {
    const { response } = await client.embeddings
      .create({ model: 'text-embedding-3-small', input: 'x' })
      .withResponse();
    assert.equal(embedServer.models.at(-1), 'bge-small');
    assert.match(
      response.headers.get('x-switchyard-backend') ?? '',
      /^embedder\/.*; model=bge-small$/,
    );
  });

  test('a name that is not an alias is sent unchanged, with no model in the header', async () => {
    const { response } = await client.embeddings
      .create({ model: 'bge-small', input: 'x' })
      .withResponse();
    assert.equal(embedServer.models.at(-1), 'bge-small');
    assert.match(
      response.headers.get('x-switchyard-backend') ?? '',
      /^embedder\/127\.0\.0\.1:\d+$/,
    );
  });

  test('a request without a model, or for a model no pool knows, goes to the first pool', async () => {
    const res = await fetch(`${baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('x-switchyard-backend') ?? '', /^chatty\//);
    // The chat pool declares no models and its endpoints' lists are unknown: it may serve it.
    const other = await client.chat.completions.create({
      model: 'mistral',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(other.model, 'mistral');
  });

  test("an upload's multipart model field is routed and rewritten", async () => {
    const transcription = await client.audio.transcriptions.create({
      file: await toFile(Buffer.alloc(2048, 7), 'clip.wav'),
      model: 'whisper-alias',
    });
    assert.equal(transcription.text, 'chat heard whisper-1');
  });

  test('/v1/models lists every pool: declared models and aliases with what they stand for', async () => {
    const res = await fetch(`${baseUrl}/v1/models`);
    const body = (await res.json()) as {
      object: string;
      data: { id: string; object: string; owned_by: string; parent?: string }[];
    };
    assert.equal(body.object, 'list');
    assert.deepEqual(body.data, [
      {
        id: 'gpt-4o-mini',
        object: 'model',
        created: 0,
        owned_by: 'switchyard:chat',
        parent: 'llama-3.1-8b-instruct',
      },
      {
        id: 'whisper-alias',
        object: 'model',
        created: 0,
        owned_by: 'switchyard:chat',
        parent: 'whisper-1',
      },
      { id: 'bge-small', object: 'model', created: 0, owned_by: 'switchyard:embed' },
      {
        id: 'text-embedding-3-small',
        object: 'model',
        created: 0,
        owned_by: 'switchyard:embed',
        parent: 'bge-small',
      },
    ]);
  });

  test("the balancer's model-not-served shed is a 404 listing every pool's models", async () => {
    const real = slots[1]!.current!;
    const shed: PickResult = { kind: 'shed', retryAfterMs: 0, reason: 'model-not-served' };
    const balancer = new Proxy(real.balancer, {
      get(target, prop) {
        if (prop === 'pick') return () => shed;
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
      },
    });
    slots[1] = { ...slots[1]!, current: { ...real, balancer } };
    try {
      const res = await fetch(`${baseUrl}/v1/embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'text-embedding-3-small', input: 'x' }),
      });
      assert.equal(res.status, 404);
      const body = (await res.json()) as OpenAIError;
      assert.equal(body.error.code, 'model_not_found');
      assert.equal(body.error.param, 'model');
      assert.equal(
        body.error.message,
        'The model `text-embedding-3-small` is not served here. Served models: bge-small, gpt-4o-mini, text-embedding-3-small, whisper-alias.' +
          ' Pool embed knows it, but none of its endpoints serves bge-small now (their /v1/models lists lack it).',
      );
    } finally {
      slots[1] = { ...slots[1], current: real };
    }
  });
});
