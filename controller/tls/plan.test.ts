import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  BACKDATE_MS,
  CA_RENEW_BEFORE_MS,
  CA_VALIDITY_MS,
  SERVING_VALIDITY_MS,
  planTls,
  servingValidity,
  subjectAltName,
  type TlsSecretFacts,
} from './plan.ts';

const NOW = Date.UTC(2026, 11, 1);
const DAY = 24 * 3600_000;
const NAMES = ['switchyard.sys.svc', '127.0.0.1'];

function healthy(): TlsSecretFacts {
  return {
    ca: { notBeforeMs: NOW - DAY, notAfterMs: NOW + CA_VALIDITY_MS, isCa: true, keyMatches: true },
    serving: {
      notBeforeMs: NOW - DAY,
      notAfterMs: NOW - DAY + SERVING_VALIDITY_MS,
      subjectAltNames: ['DNS:switchyard.sys.svc', 'IP:127.0.0.1', 'DNS:extra.example'],
      signedByCa: true,
      keyMatches: true,
    },
  };
}

describe('planTls', () => {
  it('creates a CA when the Secret does not exist', () => {
    assert.deepEqual(planTls(undefined, NAMES, NOW), {
      kind: 'create-ca',
      reason: 'the Secret does not exist',
    });
  });

  it('keeps a healthy Secret until two thirds of the serving lifetime', () => {
    const plan = planTls(healthy(), NAMES, NOW);
    assert.equal(plan.kind, 'keep');
    assert.equal(
      plan.kind === 'keep' ? plan.recheckAtMs : 0,
      NOW - DAY + (SERVING_VALIDITY_MS * 2) / 3,
    );
  });

  it('renews the serving certificate once it is due, keeping the CA', () => {
    const due = NOW - DAY + (SERVING_VALIDITY_MS * 2) / 3;
    assert.deepEqual(planTls(healthy(), NAMES, due), {
      kind: 'issue-serving',
      reason: 'tls.crt is due for renewal',
    });
  });

  for (const [what, change, reason] of [
    ['missing', (f: TlsSecretFacts) => (f.ca = undefined), 'ca.crt or ca.key is missing'],
    ['not a CA', (f: TlsSecretFacts) => (f.ca!.isCa = false), 'ca.crt is not a CA certificate'],
    [
      'with a foreign key',
      (f: TlsSecretFacts) => (f.ca!.keyMatches = false),
      'ca.key does not belong to ca.crt',
    ],
    [
      'not valid yet',
      (f: TlsSecretFacts) => (f.ca!.notBeforeMs = NOW + DAY),
      'ca.crt is not valid yet',
    ],
    [
      'ending within a year',
      (f: TlsSecretFacts) => (f.ca!.notAfterMs = NOW + CA_RENEW_BEFORE_MS),
      'ca.crt expires within a year',
    ],
  ] as const) {
    it(`starts over with a new CA when the CA is ${what}`, () => {
      const facts = healthy();
      change(facts);
      assert.deepEqual(planTls(facts, NAMES, NOW), { kind: 'create-ca', reason });
    });
  }

  for (const [what, change, reason] of [
    ['missing', (f: TlsSecretFacts) => (f.serving = undefined), 'tls.crt or tls.key is missing'],
    [
      'signed by another CA',
      (f: TlsSecretFacts) => (f.serving!.signedByCa = false),
      'tls.crt is not signed by ca.crt',
    ],
    [
      'with a foreign key',
      (f: TlsSecretFacts) => (f.serving!.keyMatches = false),
      'tls.key does not belong to tls.crt',
    ],
    [
      'missing a name',
      (f: TlsSecretFacts) => (f.serving!.subjectAltNames = ['DNS:switchyard.sys.svc']),
      'tls.crt does not cover IP:127.0.0.1',
    ],
    [
      'not valid yet',
      (f: TlsSecretFacts) => (f.serving!.notBeforeMs = NOW + DAY),
      'tls.crt is not valid yet',
    ],
  ] as const) {
    it(`issues a serving certificate under the same CA when it is ${what}`, () => {
      const facts = healthy();
      change(facts);
      assert.deepEqual(planTls(facts, NAMES, NOW), { kind: 'issue-serving', reason });
    });
  }

  it('writes IPv4 and IPv6 literals as IP names, the rest as DNS names', () => {
    assert.equal(subjectAltName('10.0.0.1'), 'IP:10.0.0.1');
    assert.equal(subjectAltName('::1'), 'IP:::1');
    assert.equal(subjectAltName('a.b.svc'), 'DNS:a.b.svc');
  });
});

describe('servingValidity', () => {
  it('is a year from a little before now', () => {
    assert.deepEqual(servingValidity(NOW + CA_VALIDITY_MS, NOW), {
      notBeforeMs: NOW - BACKDATE_MS,
      notAfterMs: NOW + SERVING_VALIDITY_MS,
    });
  });
  it('never outlives the CA', () => {
    assert.equal(servingValidity(NOW + DAY, NOW).notAfterMs, NOW + DAY);
  });
});
