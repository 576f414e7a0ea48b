import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { EndpointSpec, EndpointStatus } from '../policy/index.ts';
import { familiesText } from './exposition.ts';
import { ENDPOINT_FAMILY_HELP, SidecarMetrics, TTFT_BUCKETS_S, type CodeClass } from './metrics.ts';
import { Counter, Gauge, Histogram, Registry } from './prom.ts';

const endpoint = (id: string, backend: string): EndpointSpec => ({
  id,
  backend,
  tier: 0,
  url: `http://${id}/v1`,
  costPerMTok: 0,
});

const CODES: readonly CodeClass[] = ['2xx', '4xx', '429', '5xx', 'error', 'timeout', 'aborted'];
const BREAKER = { closed: 0, 'half-open': 1, open: 2 } as const;

/**
 * The per-endpoint families as they were defined with prom-client before the sidecar wrote them
 * itself (same names, help, labels, buckets; gauges read from the balancer at scrape time).
 */
function promClientDefinitions(pool: string, status: () => EndpointStatus[]) {
  const registry = new Registry();
  const registers = [registry];
  const labelNames = ['pool', 'backend', 'endpoint'];
  const help = ENDPOINT_FAMILY_HELP;
  const requests = new Counter({
    name: 'switchyard_requests_total',
    help: help.requests,
    labelNames: [...labelNames, 'code'],
    registers,
  });
  const ttft = new Histogram({
    name: 'switchyard_ttft_seconds',
    help: help.ttft,
    labelNames,
    buckets: TTFT_BUCKETS_S,
    registers,
  });
  const drift = new Counter({
    name: 'switchyard_drift_mismatches_total',
    help: help.driftMismatches,
    labelNames,
    registers,
  });
  const gauge = (name: string, text: string, value: (s: EndpointStatus) => number): void => {
    new Gauge({
      name,
      help: text,
      labelNames,
      registers,
      collect() {
        this.reset();
        for (const s of status()) this.set({ pool, backend: s.backend, endpoint: s.id }, value(s));
      },
    });
  };
  gauge('switchyard_inflight', help.inflight, (s) => s.inFlight);
  gauge('switchyard_breaker_state', help.breaker, (s) => BREAKER[s.breaker]);
  gauge('switchyard_ewma_ttft_seconds', help.ewmaTtft, (s) => s.ewmaTtftMs / 1000);
  gauge('switchyard_endpoint_drifted', help.drifted, (s) => (s.drifted ? 1 : 0));
  const labels = (e: EndpointSpec) => ({ pool, backend: e.backend, endpoint: e.id });
  return {
    registry,
    forEndpoint: (e: EndpointSpec) => ({
      requests: Object.fromEntries(
        CODES.map((code) => [code, requests.labels({ ...labels(e), code })]),
      ) as Record<CodeClass, { inc(): void }>,
      ttft: ttft.labels(labels(e)),
      driftMismatches: drift.labels(labels(e)),
    }),
    retain(kept: readonly EndpointSpec[], gone: readonly EndpointSpec[]) {
      void kept;
      for (const e of gone) {
        for (const code of CODES) requests.remove({ ...labels(e), code });
        ttft.remove(labels(e));
        drift.remove(labels(e));
      }
    },
  };
}

function statusOf(e: EndpointSpec, i: number): EndpointStatus {
  return {
    id: e.id,
    backend: e.backend,
    url: e.url,
    tier: 0,
    inFlight: i,
    load: i,
    ewmaTtftMs: 150 + i * 0.5,
    ewmaSeeded: i === 0,
    breaker: (['closed', 'half-open', 'open'] as const)[i % 3]!,
    slow: false,
    drifted: i % 2 === 1,
    driftMismatches: 0,
    requests: 0,
    errors: 0,
    rateLimited: 0,
    window: { requests: 0, errors: 0, rateLimited: 0 },
  } as EndpointStatus;
}

describe('sidecar metrics', () => {
  test('the per-endpoint families read as they did with prom-client', async () => {
    const specs = ['a/1', 'a/2', 'b/"quoted"'].map((id) => endpoint(id, id.split('/')[0]!));
    let rows = specs.map(statusOf);
    const ours = new SidecarMetrics('pool-1');
    ours.readGaugesFrom(() => rows);
    const theirs = promClientDefinitions('pool-1', () => rows);
    const both = (e: EndpointSpec) => [ours.forEndpoint(e), theirs.forEndpoint(e)] as const;
    const early = both(specs[0]!); // held by a request across the pool change below
    for (const [i, e] of specs.entries()) {
      for (const m of both(e)) {
        m.requests[CODES[i]!].inc();
        m.requests['2xx'].inc();
        m.ttft.observe(0.02 * (i + 1));
        if (i === 2) m.driftMismatches.inc();
      }
    }
    const compare = async (step: string) =>
      assert.equal(
        [...familiesText(ours.endpointFamilies(), 5)].join(''),
        await theirs.registry.metrics(),
        step,
      );
    await compare('after traffic');
    // a/1 leaves the pool; a request that started before finishes after.
    ours.retain(specs.slice(1));
    theirs.retain(specs.slice(1), specs.slice(0, 1));
    rows = specs.slice(1).map(statusOf);
    await compare('after the pool change');
    for (const m of early) m.requests.aborted.inc();
    await compare('after a late count');
  });

  test('the exposition is one text: each family once, contiguous, prom-client’s first', async () => {
    const metrics = new SidecarMetrics('p');
    const e = endpoint('a/1', 'a');
    metrics.readGaugesFrom(() => [statusOf(e, 1)]);
    metrics.forEndpoint(e).requests['2xx'].inc();
    metrics.retries.inc();
    let text = '';
    for await (const piece of metrics.exposition(3)) text += piece;
    assert.ok(text.endsWith('\n') && !text.endsWith('\n\n'));
    const families = text.trimEnd().split('\n\n');
    const names = families.map((f) => /^# HELP (\S+) /.exec(f)?.[1]);
    assert.equal(new Set(names).size, names.length, 'one HELP per family');
    for (const family of families) {
      const name = /^# HELP (\S+) /.exec(family)![1]!;
      assert.match(family, new RegExp(`^# HELP ${name} .*\\n# TYPE ${name} \\w+(\\n|$)`));
      for (const line of family.split('\n').slice(2))
        assert.ok(line.startsWith(name), `${line} in ${name}`);
    }
    assert.match(names[0] ?? '', /^switchyard_process_/);
    assert.ok(
      names.indexOf('switchyard_retries_total') < names.indexOf('switchyard_requests_total'),
    );
    assert.match(text, /^switchyard_retries_total\{pool="p"\} 1$/m);
    assert.match(
      text,
      /^switchyard_requests_total\{pool="p",backend="a",endpoint="a\/1",code="2xx"\} 1$/m,
    );
    assert.match(text, /^switchyard_endpoint_drifted\{pool="p",backend="a",endpoint="a\/1"\} 1$/m);
  });

  test('retain drops every series of an endpoint that left the pool, drift mismatches too', () => {
    const metrics = new SidecarMetrics('p');
    const [gone, kept] = [endpoint('a/1', 'a'), endpoint('a/2', 'a')];
    for (const e of [gone, kept]) {
      const m = metrics.forEndpoint(e);
      m.requests['2xx'].inc();
      m.ttft.observe(0.02);
      m.driftMismatches.inc();
    }
    const seriesOf = (id: string): string[] =>
      [...familiesText(metrics.endpointFamilies(), 1000)]
        .join('')
        .split('\n')
        .filter((line) => line.includes(`endpoint="${id}"`));
    assert.equal(seriesOf('a/1').filter((l) => l.startsWith('switchyard_drift_')).length, 1);
    metrics.retain([kept]);
    assert.deepEqual(seriesOf('a/1'), [], 'no series of the endpoint that left');
    assert.match(
      seriesOf('a/2').join('\n'),
      /^switchyard_drift_mismatches_total\{pool="p",backend="a",endpoint="a\/2"\} 1$/m,
    );
    // Back in the pool later, it starts from zero like its other series.
    metrics.forEndpoint(gone).driftMismatches.inc();
    assert.deepEqual(seriesOf('a/1'), [
      'switchyard_drift_mismatches_total{pool="p",backend="a",endpoint="a/1"} 1',
    ]);
  });

  test("the prefill exchange's rates are pool gauges in seconds, absent until measured", async () => {
    const metrics = new SidecarMetrics('pool-1');
    let reading: { prefillMsPerKiB: number | undefined; holdMs: number | undefined } | undefined;
    metrics.readExchangeFrom(() => reading);
    const text = async (): Promise<string> => {
      let all = '';
      for await (const piece of metrics.exposition()) all += piece;
      return all;
    };
    const series = /^switchyard_(prefill_seconds_per_kib|slot_hold_seconds)\{.*$/gm;
    assert.deepEqual((await text()).match(series), null, 'no balancer yet');
    reading = { prefillMsPerKiB: undefined, holdMs: undefined };
    assert.deepEqual((await text()).match(series), null, 'nothing measured yet');
    reading = { prefillMsPerKiB: 16, holdMs: 1200 };
    assert.deepEqual((await text()).match(series), [
      'switchyard_prefill_seconds_per_kib{pool="pool-1"} 0.016',
      'switchyard_slot_hold_seconds{pool="pool-1"} 1.2',
    ]);
  });

  test('the four gauges read the balancer once per render', () => {
    const metrics = new SidecarMetrics('p');
    let reads = 0;
    metrics.readGaugesFrom(() => {
      reads += 1;
      return [statusOf(endpoint('a/1', 'a'), 0)];
    });
    const text = [...familiesText(metrics.endpointFamilies(), 1)].join('');
    assert.equal(reads, 1);
    assert.match(text, /^switchyard_breaker_state\{[^}]*\} 0$/m);
  });
});

describe('flow control metrics', () => {
  test('refusals, queue wait and length by priority, budgets read at scrape time', async () => {
    const metrics = new SidecarMetrics('chat');
    metrics.flow.refused('budget');
    metrics.flow.refused('budget');
    metrics.flow.leftQueue(10, 0.02);
    metrics.readFlowFrom(() => ({
      queue: { countsByPriority: () => new Map([[10, 2]]) },
      budgets: () => [
        {
          id: 'workload:batch',
          workload: 'batch',
          limit: { requestsPerMinute: 100 },
          share: { requestsPerMinute: 50 },
          used: { requests: 7, tokens: 900 },
          wanted: { requests: 9, tokens: 1000 },
        },
      ],
    }));
    const text = await metrics.registry.metrics();
    assert.match(text, /switchyard_flow_refusals_total\{pool="chat",reason="budget"\} 2/);
    assert.match(
      text,
      /switchyard_flow_queue_wait_seconds_bucket\{le="0.025",pool="chat",priority="10"\} 1/,
    );
    assert.match(text, /switchyard_flow_queue_requests\{pool="chat",priority="10"\} 2/);
    const budget = 'pool="chat",budget="workload:batch",unit="requests"';
    assert.ok(text.includes(`switchyard_budget_used_per_minute{${budget}} 7`), text);
    assert.ok(text.includes(`switchyard_budget_share_per_minute{${budget}} 50`));
    assert.ok(text.includes(`switchyard_budget_limit_per_minute{${budget}} 100`));
    // No tokens budget: no tokens series.
    assert.ok(!text.includes('unit="tokens"'));
  });

  test('bounds the priority label: past 16 priorities, other', () => {
    const metrics = new SidecarMetrics('chat');
    for (let p = 0; p < 16; p++) assert.equal(metrics.priorityLabel(p), String(p));
    assert.equal(metrics.priorityLabel(99), 'other');
    assert.equal(metrics.priorityLabel(3), '3');
  });
});
