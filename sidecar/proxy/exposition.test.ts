import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Counter, Gauge, Histogram, Registry } from './prom.ts';
import {
  CounterFamily,
  HistogramFamily,
  familiesText,
  gaugeFamily,
  labelText,
  type Family,
} from './exposition.ts';

const BOUNDS = [0.005, 0.1, 1, 2.5];
const LABELS = ['pool', 'backend', 'endpoint'] as const;
type Labels = Record<(typeof LABELS)[number], string>;

/** The same families twice: prom-client's (the reference) and ours. */
function twins(): {
  registry: Registry;
  theirs: { requests: Counter; ttft: Histogram; inflight: Gauge };
  ours: { requests: CounterFamily; ttft: HistogramFamily };
  gaugeRows: { labels: Labels; value: number }[];
  families: () => Family[];
} {
  const registry = new Registry();
  const registers = [registry];
  const gaugeRows: { labels: Labels; value: number }[] = [];
  const theirs = {
    requests: new Counter({
      name: 'x_requests_total',
      help: 'Requests, "quoted" \\ and\nsplit.',
      labelNames: [...LABELS, 'code'],
      registers,
    }),
    ttft: new Histogram({
      name: 'x_ttft_seconds',
      help: 'TTFT.',
      labelNames: [...LABELS],
      buckets: BOUNDS,
      registers,
    }),
    inflight: new Gauge({
      name: 'x_inflight',
      help: 'In flight.',
      labelNames: [...LABELS],
      registers,
      collect() {
        this.reset();
        for (const row of gaugeRows) this.set(row.labels, row.value);
      },
    }),
  };
  const ours = {
    requests: new CounterFamily('x_requests_total', 'Requests, "quoted" \\ and\nsplit.'),
    ttft: new HistogramFamily('x_ttft_seconds', 'TTFT.', BOUNDS),
  };
  const inflight = gaugeFamily(
    'x_inflight',
    'In flight.',
    () => gaugeRows,
    (row) => labelText(row.labels),
    (row) => row.value,
  );
  return {
    registry,
    theirs,
    ours,
    gaugeRows,
    families: () => [ours.requests, ours.ttft, inflight],
  };
}

const join = (pieces: Iterable<string>): string => [...pieces].join('');

const ep = (endpoint: string, backend = 'b'): Labels => ({ pool: 'p', backend, endpoint });

describe('per-endpoint families written by the sidecar', () => {
  test('write byte for byte what prom-client writes, in slices of any size', async () => {
    const { registry, theirs, ours, gaugeRows, families } = twins();
    const a = ep('a/127.0.0.1:1');
    const b = ep('b "x" \\ y\nz', 'back\\slash');
    const c = ep('c');
    // Children bound first, counted later: a series exists only from its first count.
    const requests = (labels: Labels, code: string) => ({
      theirs: theirs.requests.labels({ ...labels, code }),
      ours: ours.requests.child(`${labelText(labels)},code="${code}"`),
    });
    const aOk = requests(a, '2xx');
    const bErr = requests(b, 'error');
    requests(c, '5xx');
    const cOk = requests(c, '2xx');
    for (const r of [aOk, bErr, aOk, cOk, aOk]) {
      r.theirs.inc();
      r.ours.inc();
    }
    // On a bound, between bounds, above the last one, and zero.
    for (const [labels, value] of [
      [b, 0.1],
      [a, 0.05],
      [b, 7],
      [a, 0],
      [b, 0.30000000000000004],
    ] as const) {
      theirs.ttft.labels(labels).observe(value);
      ours.ttft.child(labelText(labels)).observe(value);
    }
    gaugeRows.push(
      { labels: a, value: 3 },
      { labels: b, value: Number.NaN },
      { labels: c, value: Number.POSITIVE_INFINITY },
      { labels: ep('d'), value: -0.25 },
    );
    const expected = await registry.metrics();
    assert.match(expected, /backend="back\\\\slash",endpoint="b \\"x\\" \\\\ y\\nz"/);
    for (const linesPerSlice of [1, 2, 3, 5, 17, 10_000])
      assert.equal(join(familiesText(families(), linesPerSlice)), expected, `${linesPerSlice}`);
  });

  test('a removed series counted again starts anew, at the end, as in prom-client', async () => {
    const { registry, theirs, ours, families } = twins();
    for (const name of ['a', 'b', 'c']) {
      theirs.requests.inc({ ...ep(name), code: '2xx' });
      ours.requests.child(`${labelText(ep(name))},code="2xx"`).inc();
      theirs.ttft.observe(ep(name), 0.5);
      ours.ttft.child(labelText(ep(name))).observe(0.5);
    }
    theirs.requests.remove({ ...ep('a'), code: '2xx' });
    ours.requests.remove(`${labelText(ep('a'))},code="2xx"`);
    theirs.ttft.remove(ep('b'));
    ours.ttft.remove(labelText(ep('b')));
    theirs.requests.inc({ ...ep('a'), code: '2xx' });
    ours.requests.child(`${labelText(ep('a'))},code="2xx"`).inc();
    theirs.ttft.observe(ep('b'), 2);
    ours.ttft.child(labelText(ep('b'))).observe(2);
    const text = join(familiesText(families(), 4));
    assert.equal(text, await registry.metrics());
    assert.match(text, /endpoint="c",code="2xx"\} 1\nx_requests_total\{[^}]*endpoint="a"/);
  });

  test('families without series are a header, and the text ends with one newline', async () => {
    const { registry, families } = twins();
    const text = join(familiesText(families(), 1));
    assert.equal(text, await registry.metrics());
    assert.equal(text.split('# TYPE ').length - 1, 3);
    assert.ok(text.endsWith('x_inflight gauge\n'));
  });

  test('ends a piece after the series that brings it to the given number of lines', () => {
    const { ours, families } = twins();
    for (let i = 0; i < 10; i++) ours.requests.child(`endpoint="${i}"`).inc();
    ours.ttft.child('endpoint="h"').observe(1);
    const pieces = [...familiesText(families(), 4)];
    // Counters: 2 header lines and 10 series. The histogram: a blank and 2 header lines, then one
    // series of 4 buckets, +Inf, sum and count, never cut. The gauge: a blank and 2 header lines.
    assert.deepEqual(
      pieces.map((p) => p.split('\n').length - 1),
      [4, 4, 4, 10, 3],
    );
  });

  test('reads each piece when it is asked for', () => {
    const { ours, families } = twins();
    ours.requests.child('endpoint="a"').inc();
    const b = ours.requests.child('endpoint="b"');
    b.inc();
    const pieces = familiesText(families(), 3)[Symbol.iterator]();
    assert.equal(
      pieces.next().value,
      '# HELP x_requests_total Requests, "quoted" \\\\ and\\nsplit.\n# TYPE x_requests_total counter\nx_requests_total{endpoint="a"} 1\n',
    );
    b.inc();
    assert.match(pieces.next().value as string, /^x_requests_total\{endpoint="b"\} 2\n/);
  });

  test('a histogram refuses what is not a finite number, as prom-client does', () => {
    const { theirs, ours } = twins();
    for (const value of [Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.throws(() => theirs.ttft.observe(ep('a'), value), TypeError);
      assert.throws(() => ours.ttft.child(labelText(ep('a'))).observe(value), TypeError);
    }
    assert.equal([...ours.ttft.series()].length, 0);
  });
});
