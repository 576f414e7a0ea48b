/**
 * The fleet-wide view (issue 45), the sidecar's side, through a real `switchyard sidecar` process
 * fed by a fake controller (a real HTTP server) and two simulated servers:
 *  - the controller's `placements` event naming server B for a prompt's digest makes the sidecar
 *    send that prompt's next turn to B, though its own rendezvous home is A;
 *  - the sidecar's own request reaches the controller as an upload naming the endpoint it went to,
 *    with the prompt's digest, keep-alive, with the stream's token;
 *  - a controller that does not send `x-switchyard-placements` gets no upload;
 *  - with several pools, each pool uploads and hears its own.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import {
  PLACEMENTS_EVENT,
  PLACEMENTS_HEADER,
  parsePlacements,
  placementsPath,
  snapshotStreamPath,
  type PoolPlacements,
  type PoolSnapshot,
} from '../../crds/snapshot.ts';
import { balancePool } from '../../harness/pool-file.ts';
import {
  controllerSidecarArgs,
  startSim,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import {
  connectionOf,
  DualHttpServer,
  type AnyRequest,
  type AnyResponse,
} from '../../lib/dual-http-server.ts';
import { decodeHashes, encodeHashes, placementDigest } from '../../lib/placement-hashes.ts';
import { idHash } from '../../sidecar/policy/bounded-load.ts';
import { affinityFor, rendezvousOrder } from '../../sidecar/policy/index.ts';
import { loadPoolText } from '../../sidecar/config/pool-file.ts';
import { eventually } from '../helpers.ts';

const NS = 'apps';
const POOL = 'chat';
const TOKEN = 'placements-test-token';

/** A fake controller: its pools' streams (a snapshot, then what the test sends) and uploads. */
class FakeController {
  readonly server = new DualHttpServer({}, (req, res) => this.#handle(req, res));
  url = '';
  /** Open streams, by pool. */
  readonly open = new Map<string, AnyResponse>();
  readonly uploads: {
    pool: string;
    token: string | undefined;
    socket: number;
    body: PoolPlacements;
  }[] = [];
  readonly #sockets = new Map<unknown, number>();
  /** The connections (numbered as `uploads[].socket`) the streams came on. */
  readonly streamSockets = new Set<number>();
  readonly snapshots: PoolSnapshot[];
  /** The `x-switchyard-placements` header's value, or none (a controller before issue 45). */
  readonly placementsHeader: string | undefined;

  constructor(snapshots: PoolSnapshot | PoolSnapshot[], placementsHeader: string | undefined) {
    this.snapshots = Array.isArray(snapshots) ? snapshots : [snapshots];
    this.placementsHeader = placementsHeader;
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.server.address() as AddressInfo).port}`;
  }

  send(placements: PoolPlacements, pool = POOL): void {
    this.open
      .get(pool)
      ?.write(`event: ${PLACEMENTS_EVENT}\ndata: ${JSON.stringify(placements)}\n\n`);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  #connectionNumber(req: AnyRequest): number {
    const connection = connectionOf(req);
    if (!this.#sockets.has(connection)) this.#sockets.set(connection, this.#sockets.size);
    return this.#sockets.get(connection)!;
  }

  #handle(req: AnyRequest, res: AnyResponse): void {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const auth = req.headers.authorization;
    const token = auth?.startsWith('Bearer ') ? auth.slice(7) : undefined;
    const streamOf = this.snapshots.find((s) => path === snapshotStreamPath(NS, s.pool.name));
    const uploadOf = this.snapshots.find((s) => path === placementsPath(NS, s.pool.name));
    if (req.method === 'GET' && streamOf !== undefined) {
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        ...(this.placementsHeader === undefined
          ? {}
          : { [PLACEMENTS_HEADER]: this.placementsHeader }),
      });
      res.write(`event: snapshot\nid: 1\ndata: ${JSON.stringify(streamOf)}\n\n`);
      const pool = streamOf.pool.name;
      this.streamSockets.add(this.#connectionNumber(req));
      this.open.set(pool, res);
      res.on('close', () => this.open.delete(pool));
      return;
    }
    if (req.method === 'POST' && uploadOf !== undefined) {
      const socket = this.#connectionNumber(req);
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        const parsed = parsePlacements(JSON.parse(body));
        assert.ok(parsed.ok, `the sidecar uploaded an invalid batch: ${body}`);
        this.uploads.push({ pool: uploadOf.pool.name, token, socket, body: parsed.value });
        res.writeHead(204).end();
      });
      return;
    }
    // Reports and anything else: taken, unread.
    req.resume();
    res.writeHead(204).end();
  }
}

let dir = '';
let sims: RunningProcess[] = [];
let snapshot: PoolSnapshot;

/** Pool `name` over `urls` with prefix affinity, as the controller would send it. */
function snapshotOf(name: string, urls: string[], extra = '', names?: string[]): PoolSnapshot {
  const yaml = balancePool(
    urls,
    `  affinity: {key: Prefix, prefixChars: 4096}${extra}`,
    names,
  ).replace('metadata: {name: test}', `metadata: {name: ${name}}`);
  const loaded = loadPoolText(yaml, {});
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
  const { policy, timeouts, endpoints, hash } = loaded.pool;
  return { version: 1, hash, pool: { namespace: NS, name }, policy, timeouts, endpoints };
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'switchyard-placements-'));
  await writeFile(join(dir, 'token'), TOKEN);
  sims = [await startSim('sim-a'), await startSim('sim-b')];
  snapshot = snapshotOf(
    POOL,
    sims.map((s) => s.url),
  );
});
after(async () => {
  await stopAll(sims);
  await rm(dir, { recursive: true, force: true });
});

async function sidecarOf(controller: FakeController, flags: string[] = []) {
  const sidecar = await startSwitchyard([
    ...controllerSidecarArgs({
      controllerUrl: controller.url,
      pool: controller.snapshots.map((s) => s.pool.name),
      namespace: NS,
      tokenFile: join(dir, 'token'),
      sidecarId: 'app-1',
    }),
    '--log-level',
    'warn',
    ...flags,
  ]);
  await eventually(
    async () => (await fetch(`${sidecar.adminUrl}/readyz`)).status === 200,
    10_000,
    'the sidecar to apply the snapshot',
  );
  const client = new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'k', maxRetries: 0 });
  return { sidecar, client };
}

/** A conversation's messages: a system prompt long enough for prefix affinity, its turns. */
function conversation(topic: string, turns: number): OpenAI.ChatCompletionMessageParam[] {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: 'system', content: `You answer questions about ${topic}. `.repeat(20) },
    { role: 'user', content: `Tell me about ${topic}, in some detail please. `.repeat(8) },
  ];
  for (let i = 1; i < turns; i++)
    messages.push(
      { role: 'assistant', content: `Here is part ${i} about ${topic}. `.repeat(10) },
      { role: 'user', content: `And more about part ${i}? `.repeat(10) },
    );
  return messages;
}

/** The blocks the sidecar computes for this request body (the same code: policy/affinity.ts). */
function blocksOf(messages: OpenAI.ChatCompletionMessageParam[]) {
  const prompt = affinityFor(
    { body: { model: 'm', max_tokens: 1, messages }, headers: {} },
    snapshot.policy.affinity,
  ).prompt;
  assert.ok(prompt !== undefined, 'the test prompt is long enough for prefix affinity');
  return prompt;
}

const metric = async (sidecar: RunningProcess, name: string, pool = POOL): Promise<number> => {
  const text = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{pool="${pool}"}`));
  return line === undefined ? 0 : Number(line.split(' ').at(-1));
};

describe('placements with a controller that relays them', () => {
  const controller = (): FakeController => new FakeController(snapshot, '8192');

  test("a prompt another sidecar placed on B goes to B, though this sidecar's home for it is A", async () => {
    const fake = controller();
    await fake.start();
    const { sidecar, client } = await sidecarOf(fake);
    try {
      const ids = snapshot.endpoints.map((e) => e.id);
      // A topic whose rendezvous home (by its home key) is the first endpoint.
      let topic = '';
      for (let i = 0; topic === ''; i++) {
        const prompt = blocksOf(conversation(`topic ${i}`, 1));
        const key = prompt.hashes[prompt.homeDepth - 1]!;
        const order = rendezvousOrder(
          key,
          ids.map((id) => ({ id, idHash: idHash(id) })),
        );
        if (order[0]!.id === ids[0]) topic = `topic ${i}`;
      }
      const earlier = blocksOf(conversation(topic, 1));
      const placements: PoolPlacements = {
        endpoints: ['not-in-this-pool', ids[1]!],
        placements: [
          { endpoint: 0, ageMs: 10, hashes: encodeHashes([1, 2, 3]) },
          {
            endpoint: 1,
            ageMs: 250,
            hashes: encodeHashes(placementDigest(earlier.hashes, earlier.homeDepth)),
          },
        ],
      };
      fake.send(placements);
      await eventually(
        async () => (await metric(sidecar, 'switchyard_placements_received_total')) === 2,
        5_000,
        'the sidecar to count the two placements received',
      );
      assert.equal(
        await metric(sidecar, 'switchyard_placement_bytes_received_total'),
        Buffer.byteLength(JSON.stringify(placements)),
      );
      const next = await client.chat.completions
        .create({ model: 'm', max_tokens: 1, messages: conversation(topic, 2) })
        .withResponse();
      assert.equal(next.response.headers.get('x-switchyard-backend')?.split('/')[0], 'b');
      assert.equal(next.response.headers.get('x-switchyard-affinity'), 'hit');
    } finally {
      await stopAll([sidecar]);
      await fake.close();
    }
  });

  test("the sidecar's own request is uploaded: its digest, the endpoint it went to, one connection", async () => {
    const fake = controller();
    await fake.start();
    const { sidecar, client } = await sidecarOf(fake);
    try {
      const sent: { digest: number[]; endpoint: string }[] = [];
      for (const topic of ['gardens', 'rivers', 'clocks']) {
        const messages = conversation(topic, 1);
        const res = await client.chat.completions
          .create({ model: 'm', max_tokens: 1, messages })
          .withResponse();
        const prompt = blocksOf(messages);
        sent.push({
          digest: placementDigest(prompt.hashes, prompt.homeDepth),
          endpoint: res.response.headers.get('x-switchyard-backend')!.split(' ')[0]!,
        });
        // Apart, so that they go in separate uploads (every 100 ms).
        await new Promise((r) => setTimeout(r, 250));
      }
      await eventually(
        () => fake.uploads.reduce((n, u) => n + u.body.placements.length, 0) >= 3,
        5_000,
        'three placements uploaded',
      );
      const uploaded = fake.uploads.flatMap((u) =>
        u.body.placements.map((p) => ({
          digest: decodeHashes(p.hashes),
          endpoint: u.body.endpoints[p.endpoint]!,
          ageMs: p.ageMs,
        })),
      );
      for (const s of sent) {
        const found = uploaded.find((u) => JSON.stringify(u.digest) === JSON.stringify(s.digest));
        assert.ok(found !== undefined, 'each request is uploaded with its digest');
        assert.ok(s.endpoint.startsWith(found.endpoint), `${s.endpoint} went to ${found.endpoint}`);
        assert.ok(found.ageMs < 1_000);
      }
      assert.ok(fake.uploads.length >= 2, 'uploads go as they come, not all at the end');
      assert.ok(fake.uploads.every((u) => u.token === TOKEN));
      assert.deepEqual(new Set(fake.uploads.map((u) => u.socket)), new Set([0]), 'one connection');
      assert.deepEqual([...fake.streamSockets], [0], "the stream's own");
      assert.equal(await metric(sidecar, 'switchyard_placements_uploaded_total'), uploaded.length);
      // The same prompt again within 10 s tells the controller nothing new: not uploaded again.
      const before = uploaded.length;
      await client.chat.completions.create({
        model: 'm',
        max_tokens: 1,
        messages: conversation('gardens', 1),
      });
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(
        fake.uploads.reduce((n, u) => n + u.body.placements.length, 0),
        before,
      );
    } finally {
      await stopAll([sidecar]);
      await fake.close();
    }
  });

  test('--share-placements off: nothing uploaded, nothing applied', async () => {
    const fake = controller();
    await fake.start();
    const { sidecar, client } = await sidecarOf(fake, ['--share-placements', 'off']);
    try {
      fake.send({ endpoints: [snapshot.endpoints[1]!.id], placements: [] });
      await client.chat.completions.create({
        model: 'm',
        max_tokens: 1,
        messages: conversation('kites', 1),
      });
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(fake.uploads.length, 0);
      assert.equal(await metric(sidecar, 'switchyard_placement_bytes_received_total'), 0);
    } finally {
      await stopAll([sidecar]);
      await fake.close();
    }
  });
});

test('a controller without the x-switchyard-placements header gets no upload', async () => {
  const fake = new FakeController(snapshot, undefined);
  await fake.start();
  const { sidecar, client } = await sidecarOf(fake);
  try {
    await client.chat.completions.create({
      model: 'm',
      max_tokens: 1,
      messages: conversation('lakes', 1),
    });
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(fake.uploads.length, 0);
  } finally {
    await stopAll([sidecar]);
    await fake.close();
  }
});

test('several pools: each uploads to its own path, naming its own endpoints, and counts its own events', async () => {
  const chat = snapshotOf('chat', [sims[0]!.url], '\n  models: [chat-model]', ['chat-backend']);
  const embed = snapshotOf('embed', [sims[1]!.url], '\n  models: [embed-model]', ['embed-backend']);
  const fake = new FakeController([chat, embed], '8192');
  await fake.start();
  const { sidecar, client } = await sidecarOf(fake);
  try {
    for (const model of ['chat-model', 'embed-model'])
      await client.chat.completions.create({
        model,
        max_tokens: 1,
        messages: conversation(`pools ${model}`, 1),
      });
    await eventually(
      () => new Set(fake.uploads.map((u) => u.pool)).size === 2,
      5_000,
      'an upload to each pool',
    );
    for (const u of fake.uploads) {
      const own = (u.pool === 'chat' ? chat : embed).endpoints.map((e) => e.id);
      assert.ok(
        u.body.endpoints.every((id) => own.includes(id)),
        `${u.pool}'s upload names ${u.body.endpoints.join(', ')}`,
      );
    }
    assert.equal(await metric(sidecar, 'switchyard_placements_uploaded_total', 'chat'), 1);
    assert.equal(await metric(sidecar, 'switchyard_placements_uploaded_total', 'embed'), 1);
    // Issue 46: both pools' streams and uploads on the sidecar's one connection.
    assert.deepEqual([...fake.streamSockets], [0], 'both streams on one connection');
    assert.deepEqual(new Set(fake.uploads.map((u) => u.socket)), new Set([0]), 'and the uploads');
    // A placements event on chat's stream counts for chat only.
    fake.send({ endpoints: [chat.endpoints[0]!.id], placements: [] }, 'chat');
    await eventually(
      async () => (await metric(sidecar, 'switchyard_placement_bytes_received_total', 'chat')) > 0,
      5_000,
      "chat's placements event counted",
    );
    assert.equal(await metric(sidecar, 'switchyard_placement_bytes_received_total', 'embed'), 0);
  } finally {
    await stopAll([sidecar]);
    await fake.close();
  }
});
