/**
 * Backend faults through a real sidecar process: a faulty endpoint first in a Failover pool, a
 * healthy simulator second. Before the first body byte every fault must be invisible to the
 * client (retried on the healthy endpoint); after it, the stream ends with an SSE error event and
 * is never retried. In every case the faulty endpoint is marked (its breaker opens), it comes back
 * once it behaves, and nothing is left open or in flight.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ask, completeStream, STREAM_BODY, type Answer } from '../../harness/ask.ts';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { establishedWith } from '../../harness/proc.ts';
import { startSim, type RunningProcess } from '../../harness/processes.ts';
import { debugBackends, eventually, simStats, sleep } from '../helpers.ts';
import { brokenCleanly, errorOf, pool } from './client.ts';
import { FAULTS, startFaultBackend, type Fault, type FaultBackend } from './fault-backend.ts';
import { recordFigure } from './figures.ts';
import { endpointOf, poolYaml, startScript } from './fixtures.ts';

const STALLED_LISTENER = fileURLToPath(new URL('./stalled-listener.ts', import.meta.url));
const REQUESTS = 20;
const CONCURRENCY = 4;
const LOAD = `${REQUESTS} streams, ${CONCURRENCY} at a time`;
/**
 * Timeouts short enough that each fault costs the test little, long enough that a healthy
 * simulator on a busy 2-core machine never trips them; openFor long enough to be seen.
 */
const POLICY = [
  'mode: Failover',
  'health: {window: 30s, minRequests: 5, maxErrorRate: 0.5, openFor: 1s, maxOpenFor: 2s}',
  'retry: {budgetPercent: 100, minPerSecond: 100, maxAttempts: 2}',
  'timeouts: {connect: 500ms, firstByte: 1s, idle: 1500ms}',
];

describe('backend faults through a real sidecar', () => {
  let healthy: RunningProcess;

  before(async () => {
    healthy = await startSim('healthy', ['--slots', '64']);
  });
  after(async () => {
    await healthy.stop();
  });

  /**
   * The fault backends count every connection and request they get, and play their fault to
   * each: the sidecar's load scrape (GET /metrics) would be counted as an attempt. Off here.
   */
  const NO_SCRAPE = ['--load-scrape-every', '0'];

  /** A sidecar routing to `faultyUrl` first and the healthy simulator second. */
  const failoverTo = (faultyUrl: string): Promise<SidecarOnPool> =>
    sidecarOn(
      poolYaml(
        [`{name: faulty, url: '${faultyUrl}/v1'}`, `{name: healthy, url: '${healthy.url}/v1'}`],
        POLICY,
      ),
      NO_SCRAPE,
    );

  /**
   * Runs `body` against a fault backend playing `fault` and a sidecar in front of it (Failover to
   * the healthy simulator unless `yaml` says otherwise); stops both afterwards.
   */
  async function onFaulty(
    fault: Fault,
    body: (faulty: FaultBackend, sidecar: RunningProcess) => Promise<void>,
    yaml?: (faultyUrl: string) => string,
  ): Promise<void> {
    const faulty = await startFaultBackend(fault);
    const { sidecar, stop } =
      yaml === undefined
        ? await failoverTo(faulty.url)
        : await sidecarOn(yaml(faulty.url), NO_SCRAPE);
    try {
      await body(faulty, sidecar);
    } finally {
      await stop();
      await faulty.close();
    }
  }

  /** Sends the load; returns the answers and when the faulty endpoint's breaker opened. */
  async function load(
    sidecar: RunningProcess,
    body: unknown = STREAM_BODY,
  ): Promise<{ answers: Answer[]; markedAfterMs: number | undefined }> {
    const started = performance.now();
    let markedAfterMs: number | undefined;
    let watching = true;
    const watch = (async () => {
      while (watching && markedAfterMs === undefined) {
        if ((await endpointOf(sidecar, 'faulty'))?.breaker === 'open')
          markedAfterMs = performance.now() - started;
        await sleep(10);
      }
    })();
    const answers = await pool(REQUESTS, CONCURRENCY, () => ask(sidecar.url, body));
    await eventually(() => markedAfterMs !== undefined, 5_000, 'the breaker to open');
    watching = false;
    await watch;
    return { answers, markedAfterMs };
  }

  /**
   * Lets the faulty endpoint behave (`heal`), then sends one request every 50 ms until one is
   * served by it again; returns how long that took and how many requests failed meanwhile.
   */
  async function recovery(
    sidecar: RunningProcess,
    heal: () => Promise<void> | void,
  ): Promise<{ recoveryMs: number; lost: number; requests: number }> {
    await heal();
    const started = performance.now();
    let lost = 0;
    let requests = 0;
    for (;;) {
      const a = await ask(sidecar.url);
      requests++;
      if (!completeStream(a)) lost++;
      if (String(a.headers['x-switchyard-backend']).startsWith('faulty/')) break;
      if (performance.now() - started > 20_000) throw new Error('the endpoint never came back');
      await sleep(50);
    }
    return { recoveryMs: performance.now() - started, lost, requests };
  }

  /** Nothing in flight, and no connection of the sidecar to the faulty endpoint left open. */
  async function assertClean(sidecar: RunningProcess, faultyPort: number): Promise<void> {
    await eventually(
      async () => (await debugBackends(sidecar)).endpoints.every((e) => e.inFlight === 0),
      5_000,
      'in-flight back to 0',
    );
    await eventually(
      () => establishedWith(sidecar.pid, faultyPort) === 0,
      5_000,
      'no connection left to the faulty endpoint',
    );
  }

  const healthyRequests = async (): Promise<number> => (await simStats(healthy)).requests;

  /** Faults before the first body byte: retried, so the client sees none of them. */
  async function beforeFirstByte(t: TestContext, name: string, fault: Fault): Promise<void> {
    await onFaulty(fault, async (faulty, sidecar) => {
      const { answers, markedAfterMs } = await load(sidecar);
      const lost = answers.filter((a) => !completeStream(a));
      assert.equal(lost.length, 0, `failed: ${JSON.stringify(lost[0])}`);
      for (const a of answers)
        assert.match(String(a.headers['x-switchyard-backend']), /^healthy\//, 'served by healthy');
      const marked = (await endpointOf(sidecar, 'faulty'))!;
      assert.ok(marked.errors >= 5, `the endpoint counts its errors (${marked.errors})`);
      const slowest = Math.max(...answers.map((a) => a.ms));
      const faultyAttempts = faulty.requests;
      const back = await recovery(sidecar, () => faulty.setFault(FAULTS.ok));
      assert.equal(back.lost, 0);
      await assertClean(sidecar, faulty.port);
      recordFigure(t, {
        fault: `backend: ${name}`,
        load: LOAD,
        lost: lost.length,
        requests: REQUESTS,
        markedAfterMs: Math.round(markedAfterMs!),
        faultyAttempts,
        slowestMs: Math.round(slowest),
        recoveryMs: Math.round(back.recoveryMs),
      });
    });
  }

  test('connection refused: retried on the healthy endpoint, 0 lost; back once it listens', (t) =>
    onFaulty(FAULTS.ok, async (faulty, sidecar) => {
      await faulty.refuse();
      const { answers, markedAfterMs } = await load(sidecar);
      assert.equal(answers.filter((a) => !completeStream(a)).length, 0);
      assert.equal(faulty.connections, 0);
      const back = await recovery(sidecar, () => faulty.listen());
      assert.equal(back.lost, 0);
      await assertClean(sidecar, faulty.port);
      recordFigure(t, {
        fault: 'backend: connection refused',
        load: LOAD,
        lost: 0,
        requests: REQUESTS,
        markedAfterMs: Math.round(markedAfterMs!),
        recoveryMs: Math.round(back.recoveryMs),
      });
    }));

  test('reset before the response head: retried, 0 lost', (t) =>
    beforeFirstByte(t, 'reset before headers', FAULTS.resetBeforeHeaders));

  test('a status line that is not HTTP: retried, 0 lost', (t) =>
    beforeFirstByte(t, 'malformed status line', FAULTS.garbageStatusLine));

  test('a response head over 16 KiB: refused by the parser and retried, 0 lost', (t) =>
    beforeFirstByte(t, 'oversized response headers', FAULTS.oversizedHeaders));

  test('headers, then silence: the first-byte timeout fires, the request is retried, 0 lost', (t) =>
    beforeFirstByte(t, 'headers then stall', FAULTS.headersThenStall));

  test('an error head, then silence: retried, and its stalled connection is dropped, 0 lost', (t) =>
    beforeFirstByte(t, 'error head then stall (retried)', FAULTS.errorHeadThenStall));

  test('an error head, then silence, with no retry left: a 504 after the first-byte timeout, no hang', async (t) => {
    await onFaulty(
      FAULTS.errorHeadThenStall,
      async (faulty, sidecar) => {
        const answers = await pool(REQUESTS, CONCURRENCY, () =>
          ask(sidecar.url, STREAM_BODY, { timeoutMs: 10_000 }),
        );
        for (const a of answers) {
          assert.equal(a.status, 504, JSON.stringify(a));
          assert.equal(errorOf(a)?.code, 'upstream_timeout');
        }
        await assertClean(sidecar, faulty.port);
        recordFigure(t, {
          fault: 'backend: error head then stall, no retry possible',
          load: LOAD,
          lost: REQUESTS,
          requests: REQUESTS,
          lostAre:
            '504 upstream_timeout after timeouts.firstByte (they used to hang until the upstream closed)',
          slowestMs: Math.round(Math.max(...answers.map((a) => a.ms))),
        });
      },
      (url) =>
        poolYaml(
          [`{name: faulty, url: '${url}/v1'}`],
          // No retry, and no breaker either: every request meets the fault.
          [
            'health: {minRequests: 1000000, consecutiveErrors: 0}',
            'retry: {maxAttempts: 1}',
            POLICY[3]!,
          ],
        ),
    );
  });

  test('slow accept: connects hang, the timeouts fire, retried, 0 lost; back after the stall', async (t) => {
    const stalled = await startScript(STALLED_LISTENER, ['--stall-ms', '4000']);
    const { sidecar, stop } = await failoverTo(stalled.url);
    try {
      const { answers, markedAfterMs } = await load(sidecar);
      const lost = answers.filter((a) => !completeStream(a));
      assert.equal(lost.length, 0, `failed: ${JSON.stringify(lost[0])}`);
      const faultyErrors = (await endpointOf(sidecar, 'faulty'))!.errors;
      const back = await recovery(sidecar, async () => {
        await stalled.line(/^accepting$/);
      });
      assert.equal(back.lost, 0);
      await assertClean(sidecar, Number(new URL(stalled.url).port));
      recordFigure(t, {
        fault: 'backend: slow accept (backlog full for 4 s)',
        load: LOAD,
        lost: 0,
        requests: REQUESTS,
        markedAfterMs: Math.round(markedAfterMs!),
        faultyErrors,
        slowestMs: Math.round(Math.max(...answers.map((a) => a.ms))),
        recoveryMs: Math.round(back.recoveryMs),
      });
    } finally {
      await stop();
      await stalled.stop();
    }
  });

  /**
   * Faults after the first body byte: the client has part of a stream, so it is not retried; it
   * must end with the sidecar's SSE error event, cleanly (no hang, no reset).
   */
  async function afterFirstByte(t: TestContext, name: string, fault: Fault): Promise<void> {
    await onFaulty(fault, async (faulty, sidecar) => {
      const healthyBefore = await healthyRequests();
      const { answers, markedAfterMs } = await load(sidecar);
      const answered = answers.filter((a) => a.headers['x-switchyard-backend'] !== undefined);
      const fromFaulty = answers.filter((a) =>
        String(a.headers['x-switchyard-backend']).startsWith('faulty/'),
      );
      for (const a of fromFaulty) {
        assert.ok(brokenCleanly(a), `not a clean SSE error ending: ${JSON.stringify(a)}`);
        assert.equal(a.headers['x-switchyard-attempts'], '1');
        assert.ok(a.body.startsWith('data: {"id":"chatcmpl-fault"'), 'the bytes sent so far');
      }
      for (const a of answers.filter((x) => !fromFaulty.includes(x)))
        assert.ok(completeStream(a), `the others are served whole: ${JSON.stringify(a)}`);
      assert.equal(answered.length, REQUESTS, 'every request got a response head');
      assert.equal(fromFaulty.length, faulty.requests, 'no request reached the faulty one twice');
      assert.equal(
        (await healthyRequests()) - healthyBefore,
        REQUESTS - fromFaulty.length,
        'nothing was retried after bytes were sent',
      );
      const back = await recovery(sidecar, () => faulty.setFault(FAULTS.ok));
      await assertClean(sidecar, faulty.port);
      recordFigure(t, {
        fault: `backend: ${name}`,
        load: LOAD,
        lost: fromFaulty.length,
        requests: REQUESTS,
        lostAre: 'streams already under way on the faulty endpoint, ended with an SSE error event',
        markedAfterMs: Math.round(markedAfterMs!),
        recoveryMs: Math.round(back.recoveryMs),
      });
    });
  }

  test('reset mid-stream: an SSE error event ends the stream, no retry', (t) =>
    afterFirstByte(t, 'reset mid-stream', FAULTS.resetMidStream));

  test('silence mid-stream: the idle timeout fires, an SSE error event ends the stream', (t) =>
    afterFirstByte(t, 'stall mid-stream', FAULTS.stallMidStream));

  test('a truncated chunk: an SSE error event ends the stream', (t) =>
    afterFirstByte(t, 'truncated chunk', FAULTS.truncatedChunk));

  test('a chunk size that is not hex: an SSE error event ends the stream', (t) =>
    afterFirstByte(t, 'bad chunk framing', FAULTS.badChunkSize));

  test('a JSON answer shorter than its content-length: the client connection is cut, not hung', async (t) => {
    await onFaulty(FAULTS.shortContentLength, async (faulty, sidecar) => {
      const { answers } = await load(sidecar, { ...STREAM_BODY, stream: false });
      const fromFaulty = answers.filter((a) =>
        String(a.headers['x-switchyard-backend']).startsWith('faulty/'),
      );
      for (const a of fromFaulty)
        assert.equal(a.ended, 'error', 'the truncation reaches the client');
      assert.equal(fromFaulty.length, faulty.requests);
      await assertClean(sidecar, faulty.port);
      recordFigure(t, {
        fault: 'backend: JSON body shorter than content-length',
        load: `${REQUESTS} non-streaming requests, ${CONCURRENCY} at a time`,
        lost: fromFaulty.length,
        requests: REQUESTS,
        lostAre: 'responses under way on the faulty endpoint; the client connection is closed',
      });
    });
  });

  test('bad SSE framing inside valid HTTP: passed through byte for byte, the stream ends', async (t) => {
    await onFaulty(FAULTS.badSseFraming, async (faulty, sidecar) => {
      const answers = await pool(REQUESTS, CONCURRENCY, () => ask(sidecar.url));
      for (const a of answers) {
        assert.equal(a.status, 200);
        assert.equal(a.ended, 'end');
        assert.equal(a.body, 'garbage without a field\rdata {"not":"framed"}\rdata:');
      }
      assert.equal((await endpointOf(sidecar, 'faulty'))!.breaker, 'closed');
      await assertClean(sidecar, faulty.port);
      recordFigure(t, {
        fault: 'backend: bad SSE framing (valid HTTP)',
        load: LOAD,
        lost: 0,
        requests: REQUESTS,
        note: 'relayed unchanged: the sidecar does not parse SSE; the upstream answered 200',
      });
    });
  });
});
