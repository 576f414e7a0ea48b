import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  FINGERPRINT_WIDTH,
  cut,
  formatMs,
  formatTable,
  renderStatusTable,
  shortFingerprint,
} from './render.ts';
import {
  HEALTHY_CONDITIONS,
  HEALTHY_STATUS,
  READY,
  condition,
  debugBackends,
  debugEndpoint,
  pool,
} from './testing.ts';
import { poolView, sidecarView } from './view.ts';

const FP = 'meta-llama_Llama-3.1-70B-Instruct/fp_44709d6fcb/3f2a9c10e4b7';
const FP_ODD = 'meta-llama_Llama-3.1-70B-Instruct/fp_99999d6fcb/ffffffffffff';

/** Start offsets of the columns of a table line, found from the header's names. */
function columnStarts(header: string, names: string[]): number[] {
  return names.map((n) => header.indexOf(n));
}

describe('formatTable', () => {
  it('pads every column to its widest cell, two spaces apart, without trailing spaces', () => {
    assert.deepEqual(
      formatTable(
        ['ID', 'N', 'NOTE'],
        [
          ['a', '1', 'short'],
          ['long-id', '100', ''],
        ],
        ['left', 'right', 'left'],
      ),
      ['ID         N  NOTE', 'a          1  short', 'long-id  100'],
    );
  });

  it('counts characters, not UTF-16 units, and tolerates short rows', () => {
    assert.deepEqual(formatTable(['A', 'B'], [['x…y', 'z'], ['w']]), ['A    B', 'x…y  z', 'w']);
  });
});

describe('the small formatters', () => {
  it('formatMs: ms below a second, then seconds', () => {
    assert.deepEqual([0, 849.6, 999, 1000, 1234, 9999, 12_000, 125_000].map(formatMs), [
      '0ms',
      '850ms',
      '999ms',
      '1.00s',
      '1.23s',
      '10.00s',
      '12.0s',
      '125.0s',
    ]);
  });

  it('cut: whitespace collapsed, an ellipsis past the limit', () => {
    assert.equal(cut('  a\n  b  ', 10), 'a b');
    assert.equal(cut('abcdefghij', 10), 'abcdefghij');
    assert.equal(cut('abcdefghijk', 10), 'abcdefghi…');
  });

  it('shortFingerprint keeps system_fingerprint and hash whole, shortening the model', () => {
    assert.equal(shortFingerprint('llama/fp_a/0123456789ab'), 'llama/fp_a/0123456789ab');
    const a = shortFingerprint(FP);
    const b = shortFingerprint(FP_ODD);
    assert.equal(a, 'meta-llama_L…/fp_44709d6fcb/3f2a9c10e4b7');
    assert.equal([...a].length, FINGERPRINT_WIDTH);
    assert.notEqual(a, b, 'two different fingerprints stay different');
    assert.ok(b.endsWith('/fp_99999d6fcb/ffffffffffff'));
  });

  it('shortFingerprint cuts the middle of anything else', () => {
    const long = 'x'.repeat(30) + 'y'.repeat(30);
    const short = shortFingerprint(long);
    assert.equal([...short].length, FINGERPRINT_WIDTH);
    assert.match(short, /^x{20}…y{19}$/);
    // A system_fingerprint too long to leave the model any room.
    const wide = shortFingerprint(`model/${'f'.repeat(40)}/0123456789ab`);
    assert.equal([...wide].length, FINGERPRINT_WIDTH);
    assert.ok(wide.startsWith('model/') && wide.endsWith('0123456789ab'));
  });
});

describe('renderStatusTable: a pool', () => {
  it('a healthy pool', () => {
    assert.equal(
      renderStatusTable(poolView(pool(HEALTHY_STATUS), 'apps')),
      [
        'Pool          apps/chat (mode Balance)',
        'Ready         True',
        'Accepted      True',
        'ResolvedRefs  True',
        'Snapshot      version 4 (hash abcdef0123456789)',
        'Sidecars      3 connected, 3 in sync',
        'Endpoints     3/3 ready, 0 drifted',
        'Drift         expected llama/fp_a/0123456789ab',
        '',
        'ID               HEALTH  ERR%  429%  TTFT  DRIFT  FINGERPRINT',
        'a/10.0.0.1:8000  ok         -     -     -  ok     llama/fp_a/0123456789ab',
        'a/10.0.0.2:8000  ok         -     -     -  ok     llama/fp_a/0123456789ab',
        '1 endpoint not listed above: healthy in every sidecar (the status lists only endpoints with problems or drift probes).',
        '',
        'OK',
        '',
      ].join('\n'),
    );
  });

  it('an unhealthy pool: open, half-open, drifted, a failed probe, a False condition, a stale status', () => {
    const view = poolView(
      pool(
        {
          ...HEALTHY_STATUS,
          conditions: [
            HEALTHY_CONDITIONS[0]!,
            condition(
              'ResolvedRefs',
              'False',
              'SecretNotFound',
              'Backend provider: Secret provider-key not found',
            ),
            HEALTHY_CONDITIONS[2]!,
          ],
          endpoints: { ready: 5, total: 9, drifted: 1 },
          sidecars: { connected: 3, inSync: 2 },
          drift: {
            expected: FP,
            endpoints: [
              { id: 'b/10.0.0.9:8000', fingerprint: FP_ODD, drifted: true },
              { id: 'a/10.0.0.1:8000', fingerprint: FP, drifted: false },
              {
                id: 'a/10.0.0.3:8000',
                fingerprint: FP,
                drifted: false,
                error: 'Post "http://10.0.0.3:8000/v1/chat/completions": context deadline exceeded',
              },
            ],
          },
          endpointHealth: [
            {
              id: 'a/10.0.0.2:8000',
              breakerOpen: 2,
              halfOpen: 0,
              reporting: 3,
              errorPercent: 100,
              rateLimitPercent: 0,
              ewmaTtftMs: 12000,
            },
            {
              id: 'a/10.0.0.1:8000',
              breakerOpen: 0,
              halfOpen: 0,
              reporting: 3,
              errorPercent: 7,
              rateLimitPercent: 1,
              ewmaTtftMs: 850,
              driftMismatches: 4,
            },
            {
              id: 'c/10.0.0.5:8000',
              breakerOpen: 0,
              halfOpen: 1,
              reporting: 3,
              errorPercent: 40,
              rateLimitPercent: 0,
              ewmaTtftMs: 1500,
            },
          ],
        },
        2,
      ),
      'apps',
    );
    const text = renderStatusTable(view);
    assert.equal(
      text,
      [
        'Pool          apps/chat (mode Balance)',
        'Ready         True',
        'Accepted      True',
        'ResolvedRefs  False  SecretNotFound: Backend provider: Secret provider-key not found',
        'Generation    status is of generation 1, the spec is at 2 (the controller has not caught up)',
        'Snapshot      version 4 (hash abcdef0123456789)',
        'Sidecars      3 connected, 2 in sync (1 behind)',
        `Endpoints     5/9 ready, 1 drifted`,
        `Drift         expected ${FP}`,
        '',
        'ID               HEALTH                ERR%  429%   TTFT  DRIFT             FINGERPRINT',
        'a/10.0.0.2:8000  open on 2/3 sidecars   100     0  12.0s  -                 -',
        'c/10.0.0.5:8000  half-open on 1/3        40     0  1.50s  -                 -',
        'b/10.0.0.9:8000  ok                       -     -      -  drifted           meta-llama_L…/fp_99999d6fcb/ffffffffffff',
        'a/10.0.0.1:8000  ok                       7     1  850ms  ok, 4 mismatches  meta-llama_L…/fp_44709d6fcb/3f2a9c10e4b7',
        'a/10.0.0.3:8000  ok                       -     -      -  ok, probe failed  meta-llama_L…/fp_44709d6fcb/3f2a9c10e4b7',
        'Probe of a/10.0.0.3:8000 failed: Post "http://10.0.0.3:8000/v1/chat/completions": context deadline exceeded',
        '4 endpoints not listed above: healthy in every sidecar (the status lists only endpoints with problems or drift probes).',
        '',
        'UNHEALTHY (exit code 1):',
        '  - ResolvedRefs is False (SecretNotFound)',
        '  - a/10.0.0.2:8000: breaker open on 2/3 sidecars',
        '  - c/10.0.0.5:8000: breaker half-open on 1/3',
        `  - b/10.0.0.9:8000: drifted (${FP_ODD})`,
        '',
      ].join('\n'),
    );
    // Every row's cells start under their header (left-aligned columns).
    const lines = text.split('\n');
    const header = lines.findIndex((l) => l.startsWith('ID '));
    const starts = columnStarts(lines[header]!, ['HEALTH', 'DRIFT', 'FINGERPRINT']);
    for (const line of lines.slice(header + 1, header + 6))
      for (const at of starts) assert.match(line.slice(at - 2, at + 1), /^ {2}\S$/, line);
  });

  it('no status at all, no sidecars, nothing listed', () => {
    assert.equal(
      renderStatusTable(poolView({ metadata: { name: 'new' } }, 'apps')),
      [
        'Pool    apps/new',
        'Status  none written yet (is the controller running?)',
        '',
        'No endpoint has a problem reported or a drift probe result.',
        '',
        'UNHEALTHY (exit code 1):',
        '  - no status: the controller has not written one (is it running?)',
        '',
      ].join('\n'),
    );
    const lonely = renderStatusTable(
      poolView(
        pool({
          endpoints: { ready: 2, total: 2, drifted: 0 },
          sidecars: { connected: 0, inSync: 0 },
          conditions: [
            condition('Ready', 'False', 'NoReadyEndpoints', ''),
            condition('Accepted', 'Unknown', 'Pending', 'waiting\nfor the leader'),
          ],
        }),
        'apps',
      ),
    );
    assert.match(lonely, /^Ready {9}False {2}NoReadyEndpoints$/m);
    assert.match(lonely, /^Accepted {6}Unknown {2}Pending: waiting for the leader$/m);
    assert.match(lonely, /^ResolvedRefs {2}missing$/m);
    assert.match(lonely, /^No sidecar is connected: nothing reports endpoint health\.$/m);
    assert.doesNotMatch(lonely, /not listed/);
  });

  it('health is "-" where no sidecar reports, and more endpoints may be unhealthy past 32', () => {
    const endpointHealth = Array.from({ length: 32 }, (_, i) => ({
      id: `a/10.0.1.${i}:8000`,
      breakerOpen: 0,
      halfOpen: 0,
      reporting: 0,
      errorPercent: 50,
    }));
    const text = renderStatusTable(
      poolView(pool({ endpointHealth, sidecars: { connected: 2, inSync: 2 } }), 'apps'),
    );
    assert.match(text, /^a\/10\.0\.1\.0:8000 {3}- {9}50 /m);
    // Natural order: .2 before .10.
    assert.ok(text.indexOf('a/10.0.1.2:8000') < text.indexOf('a/10.0.1.10:8000'));
    assert.match(text, /at most 32 unhealthy endpoints: there may be more/);
    const unlisted = renderStatusTable(
      poolView(
        pool({ drift: { endpoints: [{ id: 'a/x:1', drifted: false }] }, sidecars: undefined }),
        'apps',
      ),
    );
    assert.match(unlisted, /^a\/x:1 {2}- {6}/m, 'no sidecar count: health unknown');
  });

  it('a drift section without an expected fingerprint says it is undecided', () => {
    const text = renderStatusTable(poolView(pool({ drift: { endpoints: [] } }), 'apps'));
    assert.match(text, /^Drift {9}expected \(undecided: no majority yet\)$/m);
  });
});

describe('renderStatusTable: a sidecar', () => {
  it('a healthy sidecar and an unhealthy one', () => {
    const healthy = sidecarView(
      'http://127.0.0.1:9090',
      READY,
      debugBackends([
        debugEndpoint('a/10.0.0.1:8000'),
        debugEndpoint('b/10.0.0.2:8000', {
          ewmaSeeded: true,
          ewmaTtftMs: 500,
          window: { requests: 0, errors: 0, rateLimited: 0 },
          fingerprint: null,
        }),
      ]),
    );
    assert.equal(
      renderStatusTable(healthy),
      [
        'Sidecar    http://127.0.0.1:9090',
        'Ready      yes',
        'Pool       chat (mode Balance)',
        'Snapshot   version 3 (hash 0123456789abcdef)',
        'Endpoints  2: 0 open, 0 half-open, 0 drifted',
        '',
        'ID               BREAKER  IN-FLIGHT  ERRORS/REQS  429S     EWMA TTFT  DRIFT  FINGERPRINT',
        'a/10.0.0.1:8000  closed           0    1/20 (5%)     0         413ms  ok     llama/fp_a/0123456789ab',
        'b/10.0.0.2:8000  closed           0          0/0     0  500ms (seed)  -      -',
        'ERRORS/REQS and 429S count the current health window; EWMA TTFT is what the balancer scores with.',
        '',
        'OK',
        '',
      ].join('\n'),
    );
    const unhealthy = sidecarView(
      'http://127.0.0.1:9090',
      READY,
      debugBackends([
        debugEndpoint('a/10.0.0.1:8000', { inFlight: 3, driftMismatches: 1 }),
        debugEndpoint('b/10.0.0.2:8000', {
          breaker: 'open',
          slow: true,
          window: { requests: 8, errors: 8, rateLimited: 2 },
          ewmaTtftMs: 2500,
        }),
        debugEndpoint('c/10.0.0.3:8000', { drifted: true, fingerprint: FP_ODD }),
      ]),
    );
    assert.equal(
      renderStatusTable(unhealthy),
      [
        'Sidecar    http://127.0.0.1:9090',
        'Ready      yes',
        'Pool       chat (mode Balance)',
        'Snapshot   version 3 (hash 0123456789abcdef)',
        'Endpoints  3: 1 open, 0 half-open, 1 drifted',
        '',
        'ID               BREAKER      IN-FLIGHT  ERRORS/REQS  429S  EWMA TTFT  DRIFT           FINGERPRINT',
        'b/10.0.0.2:8000  open (slow)          0   8/8 (100%)     2      2.50s  ok              llama/fp_a/0123456789ab',
        'c/10.0.0.3:8000  closed               0    1/20 (5%)     0      413ms  drifted         meta-llama_L…/fp_99999d6fcb/ffffffffffff',
        'a/10.0.0.1:8000  closed               3    1/20 (5%)     0      413ms  ok, 1 mismatch  llama/fp_a/0123456789ab',
        'ERRORS/REQS and 429S count the current health window; EWMA TTFT is what the balancer scores with.',
        '',
        'UNHEALTHY (exit code 1):',
        '  - b/10.0.0.2:8000: breaker open',
        `  - c/10.0.0.3:8000: drifted (${FP_ODD})`,
        '',
      ].join('\n'),
    );
  });

  it('a sidecar without a configuration', () => {
    const text = renderStatusTable(
      sidecarView(
        'http://127.0.0.1:9090',
        { httpStatus: 503, body: { status: 'no configuration applied yet' } },
        { pool: null, mode: null, snapshotVersion: null, endpoints: [] },
      ),
    );
    assert.equal(
      text,
      [
        'Sidecar    http://127.0.0.1:9090',
        'Ready      no (no configuration applied yet)',
        'Endpoints  0: 0 open, 0 half-open, 0 drifted',
        '',
        'No endpoints.',
        '',
        'UNHEALTHY (exit code 1):',
        '  - not ready: no configuration applied yet',
        '',
      ].join('\n'),
    );
  });

  it('never shows an API key, even one the debug answer carried', () => {
    const view = sidecarView(
      'http://x',
      READY,
      debugBackends([debugEndpoint('a/x:1', { apiKey: 'sk-secret-123' })]),
    );
    assert.doesNotMatch(renderStatusTable(view), /sk-secret/);
  });
});

describe('renderStatusTable: models', () => {
  it('shows a models table and names the model without endpoints in the verdict', () => {
    const text = renderStatusTable(
      poolView(
        pool({
          ...HEALTHY_STATUS,
          models: [
            { name: 'llama-3.1-8b-instruct', endpoints: 2 },
            { name: 'sql-lora', endpoints: 0 },
            { name: 'gpt-4o-mini', endpoints: 2, aliasOf: 'llama-3.1-8b-instruct' },
          ],
        }),
        'apps',
      ),
    );
    const tail = text.slice(text.indexOf('MODEL'));
    assert.equal(
      tail,
      [
        'MODEL                  ENDPOINTS  ALIAS OF',
        'llama-3.1-8b-instruct          2  -',
        'sql-lora                       0  -',
        'gpt-4o-mini                    2  llama-3.1-8b-instruct',
        "ENDPOINTS counts the ready endpoints whose backend declares the model (an alias: its model's).",
        '',
        'UNHEALTHY (exit code 1):',
        '  - model sql-lora: no ready endpoint declares it',
        '',
      ].join('\n'),
    );
  });
});

describe('renderStatusTable: budgets', () => {
  it('shows each budget and unit with the fleet’s use', () => {
    const view = poolView(
      pool({
        ...HEALTHY_STATUS,
        budgets: [
          {
            id: 'pool',
            sidecars: 4,
            requestsPerMinute: { limit: 600, used: 590, wanted: 1200 },
            tokensPerMinute: { limit: 100000, used: 25000, wanted: 25000 },
          },
          { id: 'odd', sidecars: 1 },
          { sidecars: 1 },
        ] as never,
      }),
      'apps',
    );
    assert.equal(view.budgets.length, 2);
    const text = renderStatusTable(view);
    const tail = text.slice(text.indexOf('BUDGET'));
    assert.equal(
      tail,
      [
        'BUDGET  UNIT      PER MINUTE         USED  WANTED  SIDECARS',
        'pool    requests         600    590 (98%)    1200         4',
        'pool    tokens        100000  25000 (25%)   25000         4',
        'USED and WANTED: the fleet over its last minute, as the sidecars last reported (WANTED counts what they refused or held for want of share).',
        '',
        'OK',
        '',
      ].join('\n'),
    );
  });

  it('has no budgets rows for a pool without them', () => {
    assert.deepEqual(poolView(pool(HEALTHY_STATUS), 'apps').budgets, []);
  });
});
