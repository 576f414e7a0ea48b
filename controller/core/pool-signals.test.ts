import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  NO_DEMAND,
  chooseServerLoad,
  decodeSignals,
  encodeSignals,
  poolSignals,
  sumDemand,
  summariseServers,
  type ReplicaSignals,
  type ServerLoad,
} from './pool-signals.ts';

const demand = (
  requestsPerSecond: number,
  shedPerSecond: number,
  queued: number,
  held: number,
) => ({
  requestsPerSecond,
  shedPerSecond,
  queued,
  held,
});

describe('sumDemand', () => {
  test('adds every field; a sidecar without a report adds nothing', () => {
    assert.deepEqual(
      sumDemand([demand(2.5, 0.5, 3, 0), undefined, demand(1, 0, 0, 4)]),
      demand(3.5, 0.5, 3, 4),
    );
  });

  test('is zero for no sidecar', () => {
    assert.deepEqual(sumDemand([]), NO_DEMAND);
  });
});

describe('summariseServers', () => {
  test('sums waiting and running, and takes the mean and max of the KV-cache use', () => {
    assert.deepEqual(
      summariseServers([
        { server: 'a', running: 3, waiting: 4, kvCacheUsage: 0.5 },
        { server: 'b', running: 7, waiting: 0, kvCacheUsage: 0.9 },
      ]),
      { servers: 2, waiting: 4, running: 10, kvCacheMean: 0.7, kvCacheMax: 0.9 },
    );
  });

  test('averages KV only over the servers that report it, and leaves out what none reports', () => {
    assert.deepEqual(
      summariseServers([
        { server: 'a', running: 2, kvCacheUsage: 0.2 },
        { server: 'b', running: 1 },
      ]),
      { servers: 2, running: 3, kvCacheMean: 0.2, kvCacheMax: 0.2 },
    );
    assert.deepEqual(summariseServers([{ server: 'a', waiting: 5 }]), { servers: 1, waiting: 5 });
  });

  test('counts a server listed under two endpoint ids once', () => {
    assert.deepEqual(
      summariseServers([
        { server: 'a', waiting: 5, kvCacheUsage: 0.4 },
        { server: 'a', waiting: 5, kvCacheUsage: 0.4 },
      ]),
      { servers: 1, waiting: 5, kvCacheMean: 0.4, kvCacheMax: 0.4 },
    );
  });

  test('is undefined when no server has a reading (not an idle pool)', () => {
    assert.equal(summariseServers([]), undefined);
  });
});

describe('chooseServerLoad', () => {
  const two: ServerLoad = { servers: 2, waiting: 1 };
  const three: ServerLoad = { servers: 3, waiting: 9 };

  test("prefers the leader's own reading", () => {
    assert.equal(chooseServerLoad(two, [three]), two);
  });

  test("else the other replicas' reading that covers the most servers, the first of equals", () => {
    assert.equal(chooseServerLoad(undefined, [two, three, { servers: 3 }]), three);
    assert.equal(chooseServerLoad(undefined, []), undefined);
  });
});

describe('poolSignals', () => {
  test("adds the other replicas' demand to the leader's and keeps pools without any", () => {
    const local = new Map<string, ReplicaSignals>([
      ['apps/chat', { demand: demand(10, 1, 2, 0), server: { servers: 2, waiting: 4 } }],
    ]);
    const remote = (key: string): ReplicaSignals[] =>
      key === 'apps/chat'
        ? [{ demand: demand(5, 0, 0, 3) }, {}]
        : key === 'apps/embed'
          ? [{ demand: demand(1, 0, 0, 0), server: { servers: 1, running: 2 } }]
          : [];
    assert.deepEqual(
      poolSignals(
        [
          ['apps/chat', 2],
          ['apps/embed', 1],
          ['apps/idle', 0],
        ],
        local,
        remote,
      ),
      [
        {
          key: 'apps/chat',
          readyEndpoints: 2,
          demand: demand(15, 1, 2, 3),
          server: { servers: 2, waiting: 4 },
        },
        {
          key: 'apps/embed',
          readyEndpoints: 1,
          demand: demand(1, 0, 0, 0),
          server: { servers: 1, running: 2 },
        },
        { key: 'apps/idle', readyEndpoints: 0, demand: NO_DEMAND },
      ],
    );
  });
});

describe('the summary form', () => {
  test('round-trips demand and server load, rounded to thousandths', () => {
    const signals: ReplicaSignals = {
      demand: demand(1 / 3, 0.25, 4, 2),
      server: { servers: 3, waiting: 4, running: 10, kvCacheMean: 2 / 3, kvCacheMax: 0.9 },
    };
    const encoded = encodeSignals(signals);
    assert.deepEqual(encoded, [0.333, 0.25, 4, 2, 3, 4, 10, 0.667, 0.9]);
    assert.deepEqual(decodeSignals(JSON.parse(JSON.stringify(encoded))), {
      demand: demand(0.333, 0.25, 4, 2),
      server: { servers: 3, waiting: 4, running: 10, kvCacheMean: 0.667, kvCacheMax: 0.9 },
    });
  });

  test('writes null for what is unknown and reads it back as absent', () => {
    assert.deepEqual(encodeSignals({}), [null, null, null, null, null, null, null, null, null]);
    assert.deepEqual(decodeSignals(encodeSignals({})), {});
    const partial = encodeSignals({ server: { servers: 1, running: 2 } });
    assert.deepEqual(decodeSignals(partial), { server: { servers: 1, running: 2 } });
  });

  test('ignores what does not parse, and fields a newer version adds', () => {
    assert.deepEqual(decodeSignals('nonsense'), {});
    assert.deepEqual(decodeSignals([1, -1, 0, 0]), {}, 'a negative rate');
    assert.deepEqual(decodeSignals([1, 0, 0, 0, 0, 5]), { demand: demand(1, 0, 0, 0) });
    assert.deepEqual(decodeSignals([1, 0, 0, 0, 2, 'x', 3, 0.5, null, 42]), {
      demand: demand(1, 0, 0, 0),
      server: { servers: 2, running: 3 },
    });
  });
});
