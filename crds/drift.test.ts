import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  fingerprintOf,
  judgeDrift,
  MAJORITY,
  parseFingerprint,
  responseMismatches,
  withDriftVerdict,
} from './drift.ts';

const fps = (entries: [string, string | undefined][]) => new Map(entries);

describe('drift fingerprints', () => {
  it('reads model/system_fingerprint/hash, with - for what is missing', () => {
    assert.equal(
      fingerprintOf({
        modelId: 'llama-3.1-8b',
        systemFingerprint: 'fp_1',
        outputHash: 'abcdef0123456789',
      }),
      'llama-3.1-8b/fp_1/abcdef012345',
    );
    assert.equal(
      fingerprintOf({ modelId: undefined, systemFingerprint: '', outputHash: 'ff' }),
      '-/-/ff',
    );
    assert.equal(
      fingerprintOf({ modelId: 'org/model', systemFingerprint: undefined, outputHash: 'aa' }),
      'org_model/-/aa',
    );
  });
});

describe('judgeDrift', () => {
  it('Majority: the endpoints that differ from most of them', () => {
    const j = judgeDrift(
      fps([
        ['a', 'X'],
        ['b', 'X'],
        ['c', 'Y'],
      ]),
      MAJORITY,
    );
    assert.equal(j.expected, 'X');
    assert.deepEqual([...j.drifted], ['c']);
  });

  it('Majority: no verdict without a strict majority', () => {
    assert.deepEqual(
      judgeDrift(
        fps([
          ['a', 'X'],
          ['b', 'Y'],
        ]),
        MAJORITY,
      ),
      { expected: undefined, drifted: new Set() },
    );
    assert.equal(
      judgeDrift(
        fps([
          ['a', 'X'],
          ['b', 'Y'],
          ['c', 'Z'],
        ]),
        MAJORITY,
      ).expected,
      undefined,
    );
    assert.equal(judgeDrift(fps([]), MAJORITY).expected, undefined);
  });

  it('an endpoint never probed successfully is not drifted, and does not count toward the majority', () => {
    const j = judgeDrift(
      fps([
        ['a', 'X'],
        ['b', undefined],
        ['c', undefined],
        ['d', 'Y'],
        ['e', 'X'],
      ]),
      MAJORITY,
    );
    assert.equal(j.expected, 'X');
    assert.deepEqual([...j.drifted], ['d']);
  });

  it('an explicit fingerprint: every endpoint that is not it', () => {
    const j = judgeDrift(
      fps([
        ['a', 'X'],
        ['b', 'X'],
        ['c', undefined],
      ]),
      'Y',
    );
    assert.equal(j.expected, 'Y');
    assert.deepEqual([...j.drifted].sort(), ['a', 'b']);
  });

  it('never marks most endpoints drifted under Majority', () => {
    fc.assert(
      fc.property(
        fc.array(fc.option(fc.constantFrom('A', 'B', 'C'), { nil: undefined }), { maxLength: 12 }),
        (list) => {
          const map = new Map(list.map((fp, i) => [`e${i}`, fp] as [string, string | undefined]));
          const j = judgeDrift(map, MAJORITY);
          const known = list.filter((x) => x !== undefined).length;
          assert.ok(j.drifted.size * 2 < known || j.drifted.size === 0);
          for (const id of j.drifted) assert.notEqual(map.get(id), undefined);
        },
      ),
    );
  });
});

describe('parseFingerprint', () => {
  it('gives back what a fingerprint records', () => {
    assert.deepEqual(parseFingerprint('llama/fp_1/abc'), {
      fingerprint: 'llama/fp_1/abc',
      model: 'llama',
      systemFingerprint: 'fp_1',
    });
    assert.deepEqual(parseFingerprint('-/-/abc'), { fingerprint: '-/-/abc' });
  });
  it('a model with a slash compares equal to its fingerprint form', () => {
    const probe = parseFingerprint(
      fingerprintOf({ modelId: 'meta/llama', systemFingerprint: undefined, outputHash: 'aa' }),
    );
    assert.equal(responseMismatches(probe, { model: 'meta/llama' }), false);
    assert.equal(responseMismatches(probe, { model: 'meta/mistral' }), true);
  });
});

describe('responseMismatches (the passive check)', () => {
  const probe = { model: 'llama', systemFingerprint: 'fp_1' };
  it('flags another model or another system_fingerprint', () => {
    assert.equal(responseMismatches(probe, { model: 'llama', systemFingerprint: 'fp_1' }), false);
    assert.equal(responseMismatches(probe, { model: 'mistral', systemFingerprint: 'fp_1' }), true);
    assert.equal(responseMismatches(probe, { model: 'llama', systemFingerprint: 'fp_2' }), true);
  });
  it('says nothing about a field either side lacks', () => {
    assert.equal(responseMismatches(probe, {}), false);
    assert.equal(responseMismatches({}, { model: 'x' }), false);
    assert.equal(responseMismatches(probe, { model: '', systemFingerprint: undefined }), false);
  });
});

describe('withDriftVerdict', () => {
  const endpoint = { id: 'a', backend: 'a', tier: 0, url: 'http://a/v1', costPerMTok: 0 };
  const fp = 'm/fp_1/0123456789ab';

  it('records the probe; a drifted endpoint is excluded only with Exclude', () => {
    assert.deepEqual(withDriftVerdict(endpoint, { fingerprint: fp, drifted: false }, 'Exclude'), {
      ...endpoint,
      probe: { fingerprint: fp, model: 'm', systemFingerprint: 'fp_1' },
    });
    const excluded = withDriftVerdict(endpoint, { fingerprint: fp, drifted: true }, 'Exclude');
    assert.equal(excluded.drifted, true);
    assert.equal(excluded.probe?.drifted, true);
    const warned = withDriftVerdict(endpoint, { fingerprint: fp, drifted: true }, 'Warn');
    assert.equal(warned.drifted, undefined);
    assert.equal(warned.probe?.drifted, true);
  });

  it('without a fingerprint there is no probe, and the endpoint itself is not changed', () => {
    assert.deepEqual(withDriftVerdict(endpoint, { drifted: false }, 'Exclude'), endpoint);
    assert.notEqual(withDriftVerdict(endpoint, { drifted: false }, 'Exclude'), endpoint);
  });
});
