/**
 * Flow control through real processes (issue 43): a standalone sidecar on a pool with
 * `flowControl`, one simulator with one slot (and `maxInFlightPerEndpoint: 1`), the official
 * `openai` client. Priority order under saturation, the queue timeout, a client that leaves the
 * queue, sheddable requests refused first, the byte bound, the priority header never forwarded.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import OpenAI from 'openai';
import { balancePool, sidecarOn } from '../../harness/pool-file.ts';
import { eventually, hello, simStats, startPool, type PoolFixture } from '../helpers.ts';

function flowPool(urls: string[], flow: Partial<Record<string, string>> = {}): string {
  const f = {
    maxQueueWait: '20s',
    queue: '{maxRequests: 10, maxBytes: 1000000}',
    saturation: '{kvCacheUsage: 0.95, maxInFlightPerEndpoint: 1}',
    ...flow,
  };
  return balancePool(
    urls,
    [
      '  flowControl:',
      '    defaultPriority: 0',
      `    maxQueueWait: ${f.maxQueueWait}`,
      `    queue: ${f.queue}`,
      `    saturation: ${f.saturation}`,
    ].join('\n'),
  );
}

/** Requests in the pool's queue now, from the sidecar's /debug/flow. */
async function queued(fixture: PoolFixture): Promise<number> {
  const flow = (await (await fetch(`${fixture.sidecar.adminUrl}/debug/flow`)).json()) as {
    pools: { queue: { requests: number } }[];
  };
  return flow.pools[0]!.queue.requests;
}

/** The sum of a metric's series whose line includes `match` (/metrics is rendered at most once a second or so). */
async function metric(fixture: PoolFixture, name: string, match = ''): Promise<number> {
  const text = await (await fetch(`${fixture.sidecar.adminUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) && line.includes(match)) sum += Number(line.split(' ').at(-1));
  }
  return sum;
}

/** Waits until the refusals counter of `reason` shows `n`. */
async function refusals(fixture: PoolFixture, reason: string, n: number): Promise<void> {
  await eventually(
    async () =>
      (await metric(fixture, 'switchyard_flow_refusals_total', `reason="${reason}"`)) === n,
    5000,
    `${n} refusal(s) of reason ${reason}`,
  );
}

/** A request that holds the simulator's one slot for a while. */
function blocker(client: OpenAI, tokens = 60): Promise<unknown> {
  return client.chat.completions.create(hello('m', { max_tokens: tokens }) as never);
}

function withPriority(
  client: OpenAI,
  priority: number | undefined,
  extra: Record<string, unknown> = {},
  signal?: AbortSignal,
): Promise<OpenAI.Chat.Completions.ChatCompletion> {
  return client.chat.completions.create(hello('m', extra) as never, {
    headers: priority === undefined ? {} : { 'x-switchyard-priority': String(priority) },
    signal,
  });
}

async function refusal(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, String(err));
    return err;
  }
  assert.fail('expected a refusal');
}

/**
 * A fresh sidecar per test: until its simulator has once reported a waiting queue (it never does
 * here: the sidecar holds the queue), a fresh load report of a running request reads as room, so
 * saturation is `maxInFlightPerEndpoint: 1` only while no report has come (the first request).
 */
describe('flow control', () => {
  let fixture: PoolFixture;

  beforeEach(async () => {
    fixture = await startPool(
      [{ name: 'a', flags: ['--slots', '1', '--decode-ms-per-token', '20'] }],
      (urls) => flowPool(urls),
      ['--load-scrape-every', '0'],
    );
  });
  afterEach(() => fixture?.stop());

  test('serves a higher priority first while the endpoint is saturated', async () => {
    const { client } = fixture;
    const busy = blocker(client);
    await eventually(async () => (await simStats(fixture.sims[0]!)).inFlight === 1);
    const order: string[] = [];
    const low = withPriority(client, 1).then(() => order.push('low'));
    await eventually(async () => (await queued(fixture)) === 1, 5000, 'the low one queued');
    const high = withPriority(client, 10).then(() => order.push('high'));
    await eventually(async () => (await queued(fixture)) === 2, 5000, 'the high one queued');
    await Promise.all([busy, low, high]);
    assert.deepEqual(order, ['high', 'low']);
    assert.equal(await queued(fixture), 0);
    // Both waited, and the wait was observed by priority.
    await eventually(
      async () =>
        (await metric(fixture, 'switchyard_flow_queue_wait_seconds_count', 'priority="10"')) === 1,
      5000,
      'the wait histogram',
    );
  });

  test('refuses a sheddable request at once while a higher priority waits', async () => {
    const { client } = fixture;
    const busy = blocker(client);
    await eventually(async () => (await simStats(fixture.sims[0]!)).inFlight === 1);
    const waiting = withPriority(client, 5);
    await eventually(async () => (await queued(fixture)) === 1, 5000, 'the priority 5 queued');
    const err = await refusal(withPriority(client, -1));
    assert.equal(err.status, 429);
    assert.equal(err.code, 'sheddable_refused');
    assert.ok(Number(err.headers?.get('retry-after')) >= 1);
    await waiting;
    await busy;
    await refusals(fixture, 'sheddable', 1);
  });

  test('a client that leaves the queue is gone from it at once', async () => {
    const { client } = fixture;
    const busy = blocker(client);
    await eventually(async () => (await simStats(fixture.sims[0]!)).inFlight === 1);
    const abort = new AbortController();
    const left = withPriority(client, 3, {}, abort.signal).catch((err: unknown) => err);
    await eventually(async () => (await queued(fixture)) === 1, 5000, 'queued');
    abort.abort();
    await left;
    await eventually(async () => (await queued(fixture)) === 0, 5000, 'the queue emptied');
    await busy;
    // The next request proceeds, and the simulator never saw the aborted one.
    await withPriority(client, 0);
    assert.equal((await simStats(fixture.sims[0]!)).requests, 2);
  });

  test('an x-switchyard-priority that is not an integer is a 400 naming the header', async () => {
    const err = await refusal(withPriority(fixture.client, 'high' as unknown as number));
    assert.equal(err.status, 400);
    assert.equal(err.code, 'invalid_priority');
    assert.match(err.message, /x-switchyard-priority/);
  });
});

describe('flow control bounds', () => {
  test('the queue timeout answers 429 queue_timeout_saturated with Retry-After', async () => {
    const fixture = await startPool(
      [{ name: 'a', flags: ['--slots', '1', '--decode-ms-per-token', '40'] }],
      (urls) => flowPool(urls, { maxQueueWait: '300ms' }),
      ['--load-scrape-every', '0'],
    );
    try {
      const busy = blocker(fixture.client, 100);
      await eventually(async () => (await simStats(fixture.sims[0]!)).inFlight === 1);
      const err = await refusal(withPriority(fixture.client, 0));
      assert.equal(err.status, 429);
      assert.equal(err.code, 'queue_timeout_saturated');
      assert.ok(Number(err.headers?.get('retry-after')) >= 1);
      assert.equal(await queued(fixture), 0);
      await refusals(fixture, 'saturated', 1);
      await busy;
    } finally {
      await fixture.stop();
    }
  });

  test('a body larger than the queue holds is refused 429 queue_full', async () => {
    const fixture = await startPool(
      [{ name: 'a', flags: ['--slots', '1', '--decode-ms-per-token', '20'] }],
      (urls) => flowPool(urls, { queue: '{maxRequests: 10, maxBytes: 2000}' }),
      ['--load-scrape-every', '0'],
    );
    try {
      const busy = blocker(fixture.client);
      await eventually(async () => (await simStats(fixture.sims[0]!)).inFlight === 1);
      const large = {
        max_tokens: 5,
        messages: [{ role: 'user', content: 'x'.repeat(5000) }],
      };
      const err = await refusal(withPriority(fixture.client, 0, large));
      assert.equal(err.status, 429);
      assert.equal(err.code, 'queue_full');
      // A small one still waits and is served.
      await withPriority(fixture.client, 0);
      await busy;
      await refusals(fixture, 'queue-full', 1);
    } finally {
      await fixture.stop();
    }
  });
});

describe("the pod's default priority", () => {
  test('--priority -1 makes requests without the header sheddable', async () => {
    const fixture = await startPool(
      [{ name: 'a', flags: ['--slots', '1', '--decode-ms-per-token', '20'] }],
      (urls) => flowPool(urls),
      ['--load-scrape-every', '0', '--priority', '-1'],
    );
    try {
      // With room, a sheddable request is served.
      const busy = withPriority(fixture.client, undefined, { max_tokens: 60 });
      await eventually(async () => (await simStats(fixture.sims[0]!)).inFlight === 1);
      const err = await refusal(withPriority(fixture.client, undefined));
      assert.equal(err.status, 429);
      assert.equal(err.code, 'sheddable_refused');
      // The header still wins: priority 0 waits and is served.
      await withPriority(fixture.client, 0);
      await busy;
    } finally {
      await fixture.stop();
    }
  });
});

describe('flow control budgets', () => {
  test('a workload over its budget gets 429 over_budget; another workload is not held', async () => {
    const fixture = await startPool(
      [{ name: 'a', flags: ['--slots', '8'] }],
      (urls) =>
        balancePool(
          urls,
          [
            '  flowControl:',
            '    maxQueueWait: 500ms',
            '    workload: {header: x-team}',
            // 30 a minute: the bucket holds 2 s of it, one request; the next has room in 2 s.
            '    budgets: [{workload: batch, requestsPerMinute: 30}]',
          ].join('\n'),
        ),
      ['--load-scrape-every', '0'],
    );
    try {
      const batch = { headers: { 'x-team': 'batch' } };
      await fixture.client.chat.completions.create(hello() as never, batch);
      const err = await refusal(fixture.client.chat.completions.create(hello() as never, batch));
      assert.equal(err.status, 429);
      assert.equal(err.code, 'over_budget');
      assert.match(err.message, /workload "batch"/);
      assert.ok(Number(err.headers?.get('retry-after')) >= 1);
      // Another team has no budget: served at once, as often as it asks.
      for (let i = 0; i < 3; i++) {
        await fixture.client.chat.completions.create(hello() as never, {
          headers: { 'x-team': 'chat' },
        });
      }
      const flow = (await (await fetch(`${fixture.sidecar.adminUrl}/debug/flow`)).json()) as {
        pools: { sharing: string; budgets: { id: string; used: { requests: number } }[] }[];
      };
      assert.equal(flow.pools[0]!.sharing, 'whole');
      assert.deepEqual(
        flow.pools[0]!.budgets.map((b) => [b.id, b.used.requests]),
        [['workload:batch', 1]],
      );
      await refusals(fixture, 'budget', 1);
    } finally {
      await fixture.stop();
    }
  });
});

describe('the priority header', () => {
  let server: http.Server;
  const seen: string[][] = [];
  let url = '';

  before(async () => {
    server = http.createServer((req, res) => {
      seen.push(Object.keys(req.headers).filter((h) => h.startsWith('x-switchyard')));
      req.resume();
      req.on('end', () => {
        const answer = JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          choices: [
            { index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' },
          ],
        });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(answer);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  for (const flow of [true, false]) {
    test(`is never forwarded (${flow ? 'with' : 'without'} flow control)`, async () => {
      const yaml = flow ? flowPool([url]) : balancePool([url]);
      const running = await sidecarOn(yaml, ['--load-scrape-every', '0', '--priority', '3']);
      try {
        const client = new OpenAI({
          baseURL: `${running.sidecar.url}/v1`,
          apiKey: 'k',
          maxRetries: 0,
        });
        seen.length = 0;
        await withPriority(client, 7);
        assert.deepEqual(seen, [[]]);
      } finally {
        await running.stop();
      }
    });
  }
});

describe('flow control with preemptSheddable', () => {
  let fixture: PoolFixture;

  beforeEach(async () => {
    fixture = await startPool(
      [{ name: 'a', flags: ['--slots', '1', '--decode-ms-per-token', '20'] }],
      (urls) =>
        flowPool(urls, {
          saturation: '{kvCacheUsage: 0.95, maxInFlightPerEndpoint: 1, preemptSheddable: true}',
        }),
      ['--load-scrape-every', '0'],
    );
  });
  afterEach(() => fixture?.stop());

  test('a higher priority preempts a sheddable request that has not answered; it is served after', async () => {
    const { client } = fixture;
    const order: string[] = [];
    // A batch request (not streamed: its answer comes back whole) holds the one slot.
    const batch = client.chat.completions
      .create(hello('m', { max_tokens: 60 }) as never, {
        headers: { 'x-switchyard-priority': '-1' },
      })
      .withResponse()
      .then(({ response }) => {
        order.push('batch');
        return response.headers.get('x-switchyard-attempts');
      });
    await eventually(async () => (await simStats(fixture.sims[0]!)).inFlight === 1);
    // Chat finds the endpoint saturated: it takes the batch request's slot at once.
    const chat = withPriority(client, 10).then(() => order.push('chat'));
    const attempts = await batch;
    await chat;
    assert.deepEqual(order, ['chat', 'batch']);
    assert.equal(attempts, '2', 'the preempted attempt and the one that answered');
    const stats = await simStats(fixture.sims[0]!);
    assert.equal(stats.aborted, 1, 'the server dropped the preempted request');
    assert.equal(stats.completed, 2);
    await eventually(
      async () => (await metric(fixture, 'switchyard_flow_preemptions_total')) === 1,
      5000,
      'the preemption counted',
    );
    assert.equal(await metric(fixture, 'switchyard_requests_total', 'code="preempted"'), 1);
  });
});
