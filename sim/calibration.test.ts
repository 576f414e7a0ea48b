/**
 * The simulator calibrated against vLLM (issue 13): every request recorded from a real vLLM 0.32
 * in test/engine/fixtures/ (scripts/engine/capture-fixtures.sh) is sent again to a simulator
 * serving the same model name, and the two answers are compared by shape (sim/calibration/): the
 * status, the headers that matter, the keys and value kinds of JSON bodies, the sequence and the
 * chunk shapes of streams, vLLM's error objects, and the `/metrics` families with their types.
 *
 * What is allowed to differ is listed below, each with its reason; an entry that no longer matches
 * anything fails the last test, so the list only ever shrinks on purpose. docs/simulator.md
 * ("Calibration against vLLM") describes it.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { startSim, stopAll } from '../harness/processes.ts';
import type { RunningProcess } from '../harness/processes.ts';
import { parseHttpFixture, parseRecordedResponse } from './calibration/http-fixture.ts';
import type { HttpFixture } from './calibration/http-fixture.ts';
import { formatDifferences, genericPath, shapeDiff } from './calibration/shape-diff.ts';
import type { ShapeDifference } from './calibration/shape-diff.ts';
import { streamDiff } from './calibration/stream-shape.ts';

const FIXTURES = fileURLToPath(new URL('../test/engine/fixtures/', import.meta.url));

/** What the recorded servers were started with, as far as the simulator has the same flags. */
const MODEL = 'tiny';
const MAX_MODEL_LEN = '2048';
/** The key of the keyed server (`keyed-models.http` sends it). */
const API_KEY = 'capture-key';
/** vLLM always answers a fingerprint; the simulator only when given one. */
const FINGERPRINT = 'vllm-0.32.0-00000000';

/** The fixtures recorded from the server started with `--api-key`. */
const isKeyed = (name: string) => name.startsWith('unauthorized-') || name.startsWith('keyed-');

/**
 * Keys whose values are part of the shape: what an object or event is, who speaks, why it ended,
 * and the fields of an error that clients branch on.
 */
const SAME_VALUE = new Set([
  'object',
  'type',
  'role',
  'finish_reason',
  'stop_reason',
  'status',
  'reason',
  'code',
  'param',
  'error',
  'detail',
  'owned_by',
  'tool_choice',
  'truncation',
  'service_tier',
]);

/** Headers left out of the comparison on both sides, and why. */
const IGNORED_HEADERS: Readonly<Record<string, string>> = {
  date: 'a timestamp (the recordings drop it)',
  server:
    "vLLM's is uvicorn's `server: uvicorn`; the simulator is not uvicorn, and no client or sidecar reads it",
  vary: "`vary: Origin` comes from vLLM's CORS middleware: it tells browser caches about cross-origin answers, which no client here makes",
  connection:
    'Node names what it does with the connection (`keep-alive`, `close`); uvicorn says nothing',
  'keep-alive':
    "the simulator keeps idle connections 65 s and says so; uvicorn closes them after 5 s unannounced (docs/engine.md): a proxy's pool must not be reset under it",
  'x-sim-backend': "the simulator's name: the tests tell backends apart by it",
};

interface Allowed {
  /** A fixture's name, or '*' for every one. */
  readonly fixture: string;
  /** The difference's path with indices as `[*]` (shape-diff.ts `genericPath`). */
  readonly path: string;
  readonly reason: string;
}

/** Differences that are deliberate or cannot matter. Each must still be needed (last test). */
const ALLOWED: readonly Allowed[] = [];

/**
 * Requests that cannot be sent as recorded, with what is changed and why. `expected` adjusts
 * vLLM's recorded answer to the changed request.
 */
interface Adaptation {
  readonly reason: string;
  adapt(
    body: Record<string, unknown>,
    sim: RunningProcess,
  ): Promise<{ body: Record<string, unknown>; expected: (answer: unknown) => unknown }>;
}

const ADAPTATIONS: Readonly<Record<string, Adaptation>> = {
  'chat-stop': {
    reason:
      'the stop string "iop" is a piece of the tiny model\'s answer; the simulator says other words, so the request stops on the second word of its own answer, and vLLM\'s stop_reason is read as that word',
    async adapt(body, sim) {
      const { stop: _stop, ...withoutStop } = body;
      const plain = await exchange(
        sim.url,
        'POST',
        '/v1/chat/completions',
        {},
        JSON.stringify(withoutStop),
      );
      const text = (JSON.parse(plain.body) as { choices: [{ message: { content: string } }] })
        .choices[0].message.content;
      const word = text.split(' ')[1];
      assert.ok(word !== undefined && word !== '', `no second word in ${JSON.stringify(text)}`);
      return {
        body: { ...body, stop: [word] },
        expected: (answer) => {
          const copy = structuredClone(answer) as { choices: { stop_reason: unknown }[] };
          for (const choice of copy.choices) choice.stop_reason = word;
          return copy;
        },
      };
    },
  },
};

/**
 * Bodies the recording shortened (capture-fixtures.sh writes the first 300 characters of a body
 * over 600): rebuilt as the script builds them, and checked against the recorded start and length.
 */
const FULL_BODIES: Readonly<Record<string, string>> = (() => {
  const long = 'hello model answer '.repeat(800);
  const messages = JSON.stringify([{ role: 'user', content: long }]);
  return {
    'error-context-length': `{"model":"${MODEL}","messages":${messages},"max_tokens":5}`,
    'error-context-length-stream': `{"model":"${MODEL}","stream":true,"messages":${messages},"max_tokens":5}`,
  };
})();

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One request over a fresh connection, its answer whole (node:http shows every header). */
function exchange(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: string | undefined,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(path, base),
      {
        method,
        agent: false,
        headers: {
          ...headers,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const flat: Record<string, string> = {};
          for (const [k, v] of Object.entries(res.headers)) {
            if (v !== undefined) flat[k] = Array.isArray(v) ? v.join(', ') : v;
          }
          resolve({
            status: res.statusCode ?? 0,
            headers: flat,
            body: Buffer.concat(chunks).toString('utf8'),
          });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** An ORCA header with its numbers as `N`: the format is the shape, the load the value. */
const numbersOut = (value: string) => value.replace(/-?\d+(\.\d+)?(e[+-]?\d+)?/g, 'N');

function headerDifferences(
  expected: Readonly<Record<string, string>>,
  actual: Readonly<Record<string, string>>,
): ShapeDifference[] {
  const out: ShapeDifference[] = [];
  const names = (h: Readonly<Record<string, string>>) =>
    Object.keys(h).filter((n) => !(n in IGNORED_HEADERS));
  for (const name of names(expected)) {
    const e = expected[name] as string;
    const a = actual[name];
    const path = `header ${name}`;
    if (a === undefined) out.push({ path, kind: 'missing', expected: e, actual: '(absent)' });
    else if (name === 'content-type' || name === 'allow' || name === 'transfer-encoding') {
      if (a !== e) out.push({ path, kind: 'value', expected: e, actual: a });
    } else if (name === 'endpoint-load-metrics' && numbersOut(a) !== numbersOut(e)) {
      out.push({ path, kind: 'value', expected: e, actual: a });
    }
  }
  for (const name of names(actual)) {
    if (!(name in expected)) {
      out.push({
        path: `header ${name}`,
        kind: 'extra',
        expected: '(absent)',
        actual: actual[name] as string,
      });
    }
  }
  return out;
}

function bodyDifferences(contentType: string | undefined, expected: string, actual: string) {
  if (contentType?.startsWith('text/event-stream') === true) {
    return streamDiff(expected, actual, { sameValue: SAME_VALUE });
  }
  if (contentType?.startsWith('application/json') === true) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(actual);
    } catch {
      return [{ path: '', kind: 'kind' as const, expected: 'JSON', actual: actual.slice(0, 60) }];
    }
    return shapeDiff(JSON.parse(expected), parsed, { sameValue: SAME_VALUE });
  }
  return expected.trim() === actual.trim()
    ? []
    : [
        {
          path: '',
          kind: 'value' as const,
          expected: expected.slice(0, 60),
          actual: actual.slice(0, 60),
        },
      ];
}

const usedAllowances = new Set<Allowed>();

/** The differences no allowance covers; marks the allowances used. */
function unexplained(fixture: string, differences: readonly ShapeDifference[]): ShapeDifference[] {
  return differences.filter((d) => {
    const path = genericPath(d.path);
    const allowance = ALLOWED.find(
      (a) => (a.fixture === '*' || a.fixture === fixture) && a.path === path,
    );
    if (allowance === undefined) return true;
    usedAllowances.add(allowance);
    return false;
  });
}

const fixtureNames = readdirSync(FIXTURES)
  .filter((f) => f.endsWith('.http'))
  .map((f) => f.slice(0, -'.http'.length))
  .sort();

describe('the simulator answers like vLLM 0.32 (test/engine/fixtures)', () => {
  let open: RunningProcess;
  let keyed: RunningProcess;
  let compared = 0;
  const common = ['--model', MODEL, '--max-model-len', MAX_MODEL_LEN, '--fingerprint', FINGERPRINT];

  before(async () => {
    [open, keyed] = await Promise.all([
      startSim('calibration', common),
      startSim('calibration-keyed', [...common, '--api-key', API_KEY]),
    ]);
  });
  after(() => stopAll([open, keyed]));

  test('the recordings are all there', () => {
    assert.ok(fixtureNames.length >= 30, `only ${fixtureNames.length} fixtures`);
    for (const name of Object.keys(FULL_BODIES)) assert.ok(fixtureNames.includes(name), name);
    for (const name of Object.keys(ADAPTATIONS)) assert.ok(fixtureNames.includes(name), name);
  });

  for (const name of fixtureNames) {
    test(name, async () => {
      const fixture: HttpFixture = parseHttpFixture(
        readFileSync(`${FIXTURES}${name}.http`, 'utf8'),
      );
      const { request: recorded, response: vllm } = fixture;
      let body = recorded.body;
      if (recorded.shortenedFrom !== undefined) {
        body = FULL_BODIES[name];
        assert.ok(body !== undefined, `${name} was recorded shortened: rebuild it in FULL_BODIES`);
        assert.equal(
          body.length,
          recorded.shortenedFrom,
          'the rebuilt body has the recorded length',
        );
        assert.ok(body.startsWith(recorded.body ?? ''), 'the rebuilt body starts as recorded');
      }
      const sim = isKeyed(name) ? keyed : open;
      let expectedBody = vllm.body;
      const adaptation = ADAPTATIONS[name];
      if (adaptation !== undefined && body !== undefined) {
        const adapted = await adaptation.adapt(JSON.parse(body) as Record<string, unknown>, sim);
        body = JSON.stringify(adapted.body);
        expectedBody = JSON.stringify(adapted.expected(JSON.parse(vllm.body)));
      }
      const answer = await exchange(
        sim.url,
        recorded.method,
        recorded.path,
        recorded.headers,
        body,
      );
      const differences: ShapeDifference[] = [];
      if (answer.status !== vllm.status) {
        differences.push({
          path: 'status',
          kind: 'value',
          expected: String(vllm.status),
          actual: String(answer.status),
        });
      }
      differences.push(...headerDifferences(vllm.headers, answer.headers));
      differences.push(...bodyDifferences(vllm.headers['content-type'], expectedBody, answer.body));
      compared++;
      const left = unexplained(name, differences);
      assert.equal(left.length, 0, `${name} differs from vLLM:\n${formatDifferences(left)}`);
    });
  }

  test("metrics: every vLLM family the simulator serves, with vLLM's type, help and labels", async () => {
    const vllm = parseRecordedResponse(readFileSync(`${FIXTURES}metrics.txt`, 'utf8'));
    const answer = await exchange(open.url, 'GET', '/metrics', {}, undefined);
    assert.equal(answer.status, vllm.status);
    assert.equal(answer.headers['content-type'], vllm.headers['content-type']);
    const expected = metricFamilies(vllm.body);
    const actual = metricFamilies(answer.body);
    for (const name of REQUIRED_FAMILIES)
      assert.ok(actual.has(name), `the simulator serves ${name}`);
    for (const [name, family] of actual) {
      const recorded = expected.get(name);
      assert.ok(recorded !== undefined, `vLLM has no family ${name}`);
      assert.equal(family.type, recorded.type, `# TYPE of ${name}`);
      assert.equal(family.help, recorded.help, `# HELP of ${name}`);
      assert.deepEqual(family.labels, recorded.labels, `label names of ${name}`);
      for (const value of family.values) {
        assert.match(value, PYTHON_FLOAT, `${name}: a value as prometheus_client prints it`);
      }
    }
    compared++;
  });

  test('every allowance is still needed', (t) => {
    if (compared < fixtureNames.length + 1) {
      t.skip('not every comparison ran');
      return;
    }
    const stale = ALLOWED.filter((a) => !usedAllowances.has(a));
    assert.deepEqual(
      stale.map((a) => `${a.fixture} ${a.path}`),
      [],
      'allowances that match no difference any more: remove them',
    );
  });
});

/** The families a router reads (docs/engine.md, the sidecar's scrape): the simulator must serve them. */
const REQUIRED_FAMILIES = [
  'vllm:num_requests_running',
  'vllm:num_requests_waiting',
  'vllm:kv_cache_usage_perc',
  'vllm:prefix_cache_queries_total',
  'vllm:prefix_cache_hits_total',
];

/** `3.0`, `0.25`, `1.7961451859261541e+09`: Python's float repr. */
const PYTHON_FLOAT = /^-?(\d+\.\d+(e[+-]\d+)?|\d+e[+-]\d+|inf|nan)$/;

interface MetricFamily {
  type: string | undefined;
  help: string | undefined;
  /** The label names of its samples, sorted, once per distinct set. */
  labels: string[];
  values: string[];
}

/** The `vllm:` families of a Prometheus text, by the name `# TYPE` gives. */
function metricFamilies(text: string): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  const family = (name: string) => {
    let f = families.get(name);
    if (f === undefined) {
      f = { type: undefined, help: undefined, labels: [], values: [] };
      families.set(name, f);
    }
    return f;
  };
  for (const line of text.split('\n')) {
    const meta = /^# (TYPE|HELP) (vllm:\S+) (.*)$/.exec(line);
    if (meta !== null) {
      const f = family(meta[2] as string);
      if (meta[1] === 'TYPE') f.type = meta[3];
      else f.help = meta[3];
      continue;
    }
    const sample = /^(vllm:[^{\s]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (sample === null) continue;
    // Histogram and summary series belong to their family's name.
    const name = (sample[1] as string).replace(/_(bucket|sum|count)$/, '');
    const f = families.get(sample[1] as string) ?? family(name);
    const labels = [...(sample[2] ?? '').matchAll(/([a-zA-Z_]\w*)="/g)]
      .map((m) => m[1] as string)
      .filter((l) => l !== 'le' && l !== 'quantile')
      .sort()
      .join(',');
    if (!f.labels.includes(labels)) f.labels.push(labels);
    f.values.push(sample[3] as string);
  }
  return families;
}
