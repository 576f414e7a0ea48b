/**
 * The choice step on its own (chooser.ts): the switchyard policy's chooser and the baseline
 * pickers are driven through the same interface over an endpoint pool, without a balancer, the way
 * a new routing rule's module would be tested.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { baselineChooser } from './baseline-pickers.ts';
import type { ChoiceInput, Chooser } from './chooser.ts';
import { DefaultChooser } from './default-chooser.ts';
import { EndpointPool, type EndpointState } from './endpoint-pool.ts';
import { TtftEwmas } from './ewma.ts';
import { PrefillExchange } from './prefill-exchange.ts';
import { PrefixIndex } from './prefix-index.ts';
import { endpoint, scriptedRng, testPolicy } from './testing.ts';

function poolOf(ids: readonly string[]): EndpointPool {
  const pool = new EndpointPool(() => 0);
  pool.update(
    ids.map((id) => endpoint(id)),
    testPolicy().health,
    false,
  );
  return pool;
}

function inputFor(pool: EndpointPool, now = 0): ChoiceInput<EndpointState> {
  const { pool: tier, candidates } = pool.tierFor('Balance', () => true);
  return { now, policy: testPolicy(), request: {}, pool: tier, candidates };
}

describe('choosers', () => {
  it('each baseline picker is a chooser that never claims affinity', () => {
    const pool = poolOf(['a', 'b', 'c']);
    const busy = pool.get('a')!;
    busy.inFlight = 2;
    const choosers: Chooser<EndpointState>[] = [
      baselineChooser('round-robin', scriptedRng([0])),
      baselineChooser('random', scriptedRng([0.9])),
      baselineChooser('least-connections', scriptedRng([0])),
    ];
    assert.deepEqual(
      choosers.map((chooser) => {
        const choice = chooser.choose(inputFor(pool));
        return [choice.endpoint.id, choice.affinity];
      }),
      [
        ['a', 'none'],
        ['c', 'none'],
        ['b', 'none'],
      ],
    );
  });

  it('the default chooser balances to the least loaded without a balancer around it', () => {
    const pool = poolOf(['a', 'b', 'c']);
    pool.get('a')!.inFlight = 1;
    pool.get('c')!.inFlight = 1;
    const chooser = new DefaultChooser({
      rng: scriptedRng([0, 0.5]),
      ewma: new TtftEwmas(500),
      prefixes: new PrefixIndex({ blocksPerEndpoint: 16, maxAgeMs: 60_000 }),
      exchange: new PrefillExchange(),
      reportMaxAgeMs: 5_000,
      stateOf: (id) => pool.get(id),
    });
    const choice = chooser.choose(inputFor(pool));
    assert.equal(choice.endpoint.id, 'b');
    assert.equal(choice.affinity, 'none');
  });
});
