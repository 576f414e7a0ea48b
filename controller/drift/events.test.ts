import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { driftEvent } from './events.ts';

describe('drift events', () => {
  it('a drifted endpoint is a Warning naming both fingerprints and what happens to it', () => {
    const e = driftEvent(
      { kind: 'drifted', endpoint: 'gpus/e2', fingerprint: 'm/b/1', expected: 'm/a/2' },
      'Exclude',
    );
    assert.equal(e.type, 'Warning');
    assert.equal(e.reason, 'EndpointDrifted');
    assert.match(
      e.message,
      /gpus\/e2 answers m\/b\/1, the pool expects m\/a\/2: it gets no traffic/,
    );
    assert.match(driftEvent({ kind: 'drifted' }, 'Warn').message, /still gets traffic/);
  });
  it('recovery is Normal; a lost majority is a Warning that says how to decide', () => {
    const cleared = driftEvent(
      { kind: 'cleared', endpoint: 'gpus/e2', expected: 'm/a/2' },
      'Exclude',
    );
    assert.deepEqual([cleared.type, cleared.reason], ['Normal', 'EndpointDriftCleared']);
    assert.match(cleared.message, /back in routing/);
    assert.doesNotMatch(driftEvent({ kind: 'cleared' }, 'Warn').message, /back in routing/);
    const undecided = driftEvent({ kind: 'undecided' }, 'Exclude');
    assert.equal(undecided.reason, 'DriftUndecided');
    assert.match(undecided.message, /set drift.expect/);
  });
});
