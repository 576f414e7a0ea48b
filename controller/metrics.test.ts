import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PoolSignals } from './core/pool-signals.ts';
import { ControllerMetrics } from './metrics.ts';

/** The metrics text of a controller whose gauges read `signals`. */
function exposition(signals: () => readonly PoolSignals[]): Promise<string> {
  const metrics = new ControllerMetrics();
  metrics.readFrom({
    queueDepth: () => 0,
    connectedSidecars: () => 0,
    isLeader: () => true,
    poolSignals: signals,
  });
  return metrics.registry.metrics();
}

/** The sample lines of the `switchyard_pool_*` families. */
function poolLines(text: string): string[] {
  return text.split('\n').filter((l) => l.startsWith('switchyard_pool_'));
}

describe('the autoscaling gauges', () => {
  it('writes each pool under its namespace and name, leaving out what no server reports', async () => {
    const text = await exposition(() => [
      {
        key: 'apps/chat',
        readyEndpoints: 2,
        demand: { requestsPerSecond: 12.5, shedPerSecond: 0.5, queued: 3, held: 0 },
        server: { servers: 2, waiting: 4, running: 10, kvCacheMean: 0.7, kvCacheMax: 0.9 },
      },
      {
        key: 'ml/embed',
        readyEndpoints: 0,
        demand: { requestsPerSecond: 1, shedPerSecond: 1, queued: 0, held: 5 },
      },
    ]);
    assert.deepEqual(poolLines(text), [
      'switchyard_pool_server_requests_waiting{namespace="apps",pool="chat"} 4',
      'switchyard_pool_server_requests_running{namespace="apps",pool="chat"} 10',
      'switchyard_pool_server_kv_cache_usage_mean{namespace="apps",pool="chat"} 0.7',
      'switchyard_pool_server_kv_cache_usage_max{namespace="apps",pool="chat"} 0.9',
      'switchyard_pool_ready_endpoints{namespace="apps",pool="chat"} 2',
      'switchyard_pool_ready_endpoints{namespace="ml",pool="embed"} 0',
      'switchyard_pool_demand_requests_per_second{namespace="apps",pool="chat"} 12.5',
      'switchyard_pool_demand_requests_per_second{namespace="ml",pool="embed"} 1',
      'switchyard_pool_demand_shed_per_second{namespace="apps",pool="chat"} 0.5',
      'switchyard_pool_demand_shed_per_second{namespace="ml",pool="embed"} 1',
      'switchyard_pool_demand_queued_requests{namespace="apps",pool="chat"} 3',
      'switchyard_pool_demand_queued_requests{namespace="ml",pool="embed"} 0',
      'switchyard_pool_demand_held_requests{namespace="apps",pool="chat"} 0',
      'switchyard_pool_demand_held_requests{namespace="ml",pool="embed"} 5',
    ]);
    assert.match(text, /^# TYPE switchyard_pool_demand_held_requests gauge$/m);
    assert.match(text, /^# HELP switchyard_pool_server_requests_waiting .*On the leader only\.$/m);
  });

  it('reads the signals once per scrape, and drops a pool that is gone', async () => {
    let reads = 0;
    let pools: PoolSignals[] = [
      {
        key: 'apps/chat',
        readyEndpoints: 1,
        demand: { requestsPerSecond: 0, shedPerSecond: 0, queued: 0, held: 0 },
      },
    ];
    const metrics = new ControllerMetrics();
    metrics.readFrom({
      queueDepth: () => 0,
      connectedSidecars: () => 0,
      isLeader: () => true,
      poolSignals: () => {
        reads++;
        return pools;
      },
    });
    assert.equal(poolLines(await metrics.registry.metrics()).length, 5);
    assert.equal(reads, 1);
    pools = [];
    assert.deepEqual(poolLines(await metrics.registry.metrics()), []);
    assert.equal(reads, 2);
  });

  it('writes no pool series without signals (a replica that does not lead)', async () => {
    assert.deepEqual(poolLines(await exposition(() => [])), []);
  });
});
