import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  DURATION_HELP,
  DURATION_MAX_LENGTH,
  DURATION_MIN_LENGTH,
  DURATION_PATTERN,
  formatDuration,
  parseDuration,
} from './duration.ts';

function ms(text: string): number {
  const parsed = parseDuration(text);
  assert.ok(parsed.ok, `${text} should parse`);
  return parsed.ms;
}

function reason(text: string): string {
  const parsed = parseDuration(text);
  assert.ok(!parsed.ok, `${text} should not parse`);
  assert.ok(parsed.reason.startsWith(`${DURATION_HELP}: `), parsed.reason);
  return parsed.reason.slice(DURATION_HELP.length + 2);
}

describe('parseDuration', () => {
  it('reads every unit and combination, largest first', () => {
    assert.equal(ms('500ms'), 500);
    assert.equal(ms('5s'), 5_000);
    assert.equal(ms('10m'), 600_000);
    assert.equal(ms('1h'), 3_600_000);
    assert.equal(ms('1h30m'), 5_400_000);
    assert.equal(ms('2m30s'), 150_000);
    assert.equal(ms('1s500ms'), 1_500);
    assert.equal(ms('1h2m3s4ms'), 3_723_004);
    assert.equal(ms('999999h'), 999_999 * 3_600_000);
  });

  it('says what is wrong, for a person', () => {
    assert.equal(reason('500'), '"500" has no unit (500ms? 500s?)');
    assert.equal(reason('1.5'), '"1.5" has no unit (1.5ms? 1.5s?)');
    assert.equal(reason(''), 'it is empty');
    assert.equal(reason(' 5s'), 'remove the spaces around it');
    assert.equal(reason('1.5s'), 'use whole numbers (1500ms, not 1.5s)');
    assert.equal(reason('5sec'), 'unknown unit "sec" (use h, m, s or ms)');
    assert.equal(reason('5S'), 'unknown unit "S" (use h, m, s or ms)');
    assert.equal(reason('1d'), 'unknown unit "d" (use h, m, s or ms)');
    assert.equal(reason('1µs'), 'unknown unit "µs" (use h, m, s or ms)');
    assert.equal(
      reason('30m1h'),
      'put the largest unit first and each unit only once (1h30m, not 30m1h)',
    );
    assert.equal(
      reason('5s5s'),
      'put the largest unit first and each unit only once (1h30m, not 30m1h)',
    );
    assert.equal(reason('0s'), 'it must be longer than 0');
    assert.equal(reason('0h0m'), 'it must be longer than 0');
    assert.equal(reason('1h0m'), 'leave out zero parts (1h, not 1h0m)');
    assert.equal(reason('05s'), 'remove the leading zeros');
    assert.equal(reason('1000000ms'), 'each number may have at most 6 digits');
    assert.equal(reason('5 s'), 'write numbers with units h, m, s or ms and nothing else');
    assert.equal(reason('-5s'), 'write numbers with units h, m, s or ms and nothing else');
    assert.equal(reason('h'), 'write numbers with units h, m, s or ms and nothing else');
    assert.equal(reason('5s3'), '"3" has no unit');
  });

  it('accepts exactly what the schema pattern accepts', () => {
    const pattern = new RegExp(DURATION_PATTERN);
    const inPattern = (t: string) =>
      pattern.test(t) && t.length >= DURATION_MIN_LENGTH && t.length <= DURATION_MAX_LENGTH;
    const token = fc.constantFrom(
      '0',
      '1',
      '5',
      '9',
      '00',
      '10',
      '999999',
      '1000000',
      'h',
      'm',
      's',
      'ms',
      '.',
      ' ',
      'x',
    );
    fc.assert(
      fc.property(fc.array(token, { maxLength: 10 }), (parts) => {
        const text = parts.join('');
        assert.equal(parseDuration(text).ok, inPattern(text), text);
      }),
      { numRuns: 3000 },
    );
  });

  it('never produces more than MAX_SAFE_INTEGER or a fraction', () => {
    assert.equal(ms('999999h999999m999999s999999ms') <= Number.MAX_SAFE_INTEGER, true);
    assert.equal('999999h999999m999999s999999ms'.length, DURATION_MAX_LENGTH);
  });
});

describe('formatDuration', () => {
  it('writes the largest units first and leaves out zero parts', () => {
    assert.equal(formatDuration(500), '500ms');
    assert.equal(formatDuration(90_000), '1m30s');
    assert.equal(formatDuration(3_600_000), '1h');
    assert.equal(formatDuration(5_400_000), '1h30m');
    assert.equal(formatDuration(1_500), '1s500ms');
    assert.equal(formatDuration(0), '0s');
    assert.equal(formatDuration(-1_500), '-1s500ms');
    assert.equal(formatDuration(1.4), '1ms');
    assert.equal(formatDuration(Infinity), 'Infinity');
  });

  it('round-trips through parseDuration', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 999_999 * 3_600_000 }), (n) => {
        assert.equal(ms(formatDuration(n)), n);
      }),
      { numRuns: 2000 },
    );
  });
});
