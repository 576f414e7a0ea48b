import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { describe, test } from 'node:test';
import { checkTicket, issueTicket, ticketKey, type TicketClaims } from './review-ticket.ts';

const KEY = ticketKey('-----BEGIN PRIVATE KEY-----\nserving key A\n-----END PRIVATE KEY-----\n');
const OTHER = ticketKey('-----BEGIN PRIVATE KEY-----\nserving key B\n-----END PRIVATE KEY-----\n');
const HASH = 'a'.repeat(64);
const NOW = 1_800_000_000_000;

const claims: TicketClaims = {
  tokenHash: HASH,
  namespace: 'team-a',
  serviceAccount: 'chat',
  podName: 'chat-7d9f',
  podUid: 'uid-1',
  accountUid: 'sa-uid-1',
  expiresAtMs: NOW + 60_000,
};

describe('review tickets', () => {
  test('a ticket reads back as issued, by every replica sharing the serving key', () => {
    const ticket = issueTicket(KEY, claims);
    assert.match(ticket, /^t1\.[\w-]+\.[\w-]+$/);
    assert.ok(ticket.length < 400, `${ticket.length} bytes: small enough for a header`);
    assert.deepEqual(checkTicket([KEY], ticket, HASH, NOW), { ok: true, claims });
    // Same key material on another replica: the same derived key.
    const again = ticketKey(
      '-----BEGIN PRIVATE KEY-----\nserving key A\n-----END PRIVATE KEY-----\n',
    );
    assert.ok(checkTicket([again], ticket, HASH, NOW).ok);
    const noPod = issueTicket(KEY, { ...claims, podName: undefined, podUid: undefined });
    assert.deepEqual(checkTicket([KEY], noPod, HASH, NOW), {
      ok: true,
      claims: { ...claims, podName: undefined, podUid: undefined },
    });
  });

  test('after a key rotation the previous key is still taken; another key never is', () => {
    const ticket = issueTicket(KEY, claims);
    assert.ok(checkTicket([OTHER, KEY], ticket, HASH, NOW).ok);
    assert.deepEqual(checkTicket([OTHER], ticket, HASH, NOW), { ok: false, reason: 'signature' });
    assert.deepEqual(checkTicket([], ticket, HASH, NOW), { ok: false, reason: 'signature' });
  });

  test('another token, an expired ticket and a forged payload are refused', () => {
    const ticket = issueTicket(KEY, claims);
    assert.deepEqual(checkTicket([KEY], ticket, 'b'.repeat(64), NOW), {
      ok: false,
      reason: 'other-token',
    });
    assert.deepEqual(checkTicket([KEY], ticket, HASH, claims.expiresAtMs), {
      ok: false,
      reason: 'expired',
    });
    // The same signature on a payload that names another namespace.
    const [version, , signature] = ticket.split('.');
    const forged = Buffer.from(
      JSON.stringify({ h: HASH, n: 'kube-system', s: 'chat', e: NOW + 60_000 }),
    ).toString('base64url');
    assert.deepEqual(checkTicket([KEY], `${version}.${forged}.${signature}`, HASH, NOW), {
      ok: false,
      reason: 'signature',
    });
  });

  test('anything not a ticket is malformed, never an exception', () => {
    for (const bad of ['', 'x', 't1.a', 't2.a.b', 'a.b.c.d', `t1.${'x'.repeat(3000)}.y`])
      assert.deepEqual(checkTicket([KEY], bad, HASH, NOW).ok, false, bad.slice(0, 20));
    // Signed as the module signs (HMAC over "t1.<payload>"), but not the claims a ticket has.
    const wrongShape = (payload: unknown): string => {
      const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
      return `t1.${body}.${createHmac('sha256', KEY).update(`t1.${body}`).digest('base64url')}`;
    };
    assert.deepEqual(checkTicket([KEY], wrongShape({ h: HASH, n: 1, s: 's', e: 1 }), HASH, NOW), {
      ok: false,
      reason: 'malformed',
    });
    assert.deepEqual(checkTicket([KEY], wrongShape([1, 2]), HASH, NOW), {
      ok: false,
      reason: 'malformed',
    });
  });
});
