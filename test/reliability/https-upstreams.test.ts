/**
 * https upstreams through real processes: simulators serving TLS with certificates of a CA made at
 * test time, a sidecar trusting that CA through a backend's `tls.caBundle`, and the official
 * `openai` client in front. A certificate the sidecar must refuse (another CA, another name,
 * expired) fails its attempt like a refused connection: counted against that endpoint, retried on
 * a healthy peer, logged with its reason, and the process lives on.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { createCa, issueServingCertificate } from '../../controller/tls/certificates.ts';
import { scratchDir, sidecarOn } from '../../harness/pool-file.ts';
import { startSim, stopAll, type RunningProcess } from '../../harness/processes.ts';
import { get } from 'node:https';
import { debugBackends, eventually, type SimStats } from '../helpers.ts';
import { startFaultBackend } from './fault-backend.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';

const YEAR_MS = 365 * 24 * 3600_000;

/** A CA and the PEM files of serving certificates it (or another CA) signed. */
interface TestPki {
  /** The CA the pools trust (made three years ago, so it can sign an expired certificate). */
  ca: string;
  dir: string;
  /** Writes a certificate and key for `names`, signed by `signer`, and returns sim flags. */
  serving(
    file: string,
    signer: { ca: string; caKey: string },
    names: string[],
    issuedAtMs?: number,
  ): Promise<string[]>;
}

async function makePki(dir: string, nowMs: number): Promise<TestPki & { signer: TestCa }> {
  const signer = await createCa('switchyard-test-upstream-ca', nowMs - 3 * YEAR_MS);
  return {
    ca: signer.ca,
    dir,
    signer,
    async serving(file, by, names, issuedAtMs = nowMs) {
      const { cert, key } = await issueServingCertificate(by, names, issuedAtMs);
      const certFile = join(dir, `${file}.crt`);
      const keyFile = join(dir, `${file}.key`);
      await writeFile(certFile, cert);
      await writeFile(keyFile, key, { mode: 0o600 });
      return ['--tls-cert', certFile, '--tls-key', keyFile];
    },
  };
}

type TestCa = { ca: string; caKey: string };

/** A backend's `tls` as a YAML flow mapping (a JSON string is a YAML double-quoted one). */
const tlsYaml = (fields: Record<string, string | boolean>): string =>
  `{${Object.entries(fields)
    .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
    .join(', ')}}`;

const POLICY = [
  'mode: Failover',
  'health: {window: 30s, minRequests: 3, maxErrorRate: 0.5, openFor: 30s, maxOpenFor: 60s}',
  'retry: {budgetPercent: 100, minPerSecond: 100, maxAttempts: 4}',
  'timeouts: {connect: 2s, firstByte: 5s, idle: 5s}',
];
const NO_SCRAPE = ['--load-scrape-every', '0'];

/**
 * A simulator's /admin/stats over https. The test reads its own simulators without checking
 * their certificates: some of them are meant to fail that check.
 */
function simStats(sim: RunningProcess): Promise<SimStats> {
  return new Promise((resolve, reject) => {
    get(`${sim.url}/admin/stats`, { rejectUnauthorized: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => {
        resolve(JSON.parse(text) as SimStats);
      });
      res.on('error', reject);
    }).on('error', reject);
  });
}

const client = (sidecar: RunningProcess): OpenAI =>
  new OpenAI({ baseURL: `${sidecar.url}/v1`, apiKey: 'client-key', maxRetries: 0 });

describe('https upstreams', () => {
  let cleanup: () => Promise<void>;
  let pki: TestPki & { signer: TestCa };
  const sims: RunningProcess[] = [];
  let trusted: RunningProcess;
  let namedOnly: RunningProcess;
  let otherCa: RunningProcess;
  let wrongName: RunningProcess;
  let expired: RunningProcess;

  before(async () => {
    const scratch = await scratchDir();
    cleanup = scratch.cleanup;
    const nowMs = Date.now();
    pki = await makePki(scratch.dir, nowMs);
    const stranger = await createCa('switchyard-test-stranger-ca', nowMs);
    const loopback = ['127.0.0.1', 'localhost'];
    const start = async (name: string, flags: string[]): Promise<RunningProcess> => {
      const sim = await startSim(name, flags);
      sims.push(sim);
      return sim;
    };
    trusted = await start('trusted', await pki.serving('trusted', pki.signer, loopback));
    namedOnly = await start('named', await pki.serving('named', pki.signer, ['sim.test']));
    otherCa = await start('other-ca', await pki.serving('other-ca', stranger, loopback));
    wrongName = await start('wrong-name', await pki.serving('wrong', pki.signer, ['wrong.test']));
    expired = await start(
      'expired',
      await pki.serving('expired', pki.signer, loopback, nowMs - 2 * YEAR_MS),
    );
  });
  after(async () => {
    await stopAll(sims);
    await cleanup();
  });

  test('the simulator serves https with the given certificate', () => {
    for (const sim of sims) assert.match(sim.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  });

  test('a backend trusted through caBundle carries chat traffic from the openai client', async (t) => {
    const { sidecar, stop } = await sidecarOn(
      poolYaml([`{name: tls, url: '${trusted.url}/v1', tls: ${tlsYaml({ caBundle: pki.ca })}}`]),
      NO_SCRAPE,
    );
    try {
      const openai = client(sidecar);
      const REQUESTS = 10;
      let streamed = 0;
      for (let i = 0; i < REQUESTS / 2; i++) {
        const answer = await openai.chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: `hello ${i}` }],
          max_tokens: 8,
        });
        assert.ok((answer.choices[0]?.message.content ?? '').length > 0);
        const stream = await openai.chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: `stream ${i}` }],
          max_tokens: 8,
          stream: true,
        });
        for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ? 1 : 0;
      }
      assert.ok(streamed >= REQUESTS / 2, `${streamed} streamed chunks`);
      const stats = await simStats(trusted);
      assert.ok(stats.requests >= REQUESTS, JSON.stringify(stats));
      recordFigure(t, {
        fault: 'https backend trusted through caBundle',
        load: `${REQUESTS} requests (half streamed), openai client`,
        lost: 0,
        requests: REQUESTS,
      });
    } finally {
      await stop();
    }
  });

  test('serverName checks a name the URL does not carry', async () => {
    const { sidecar, stop } = await sidecarOn(
      poolYaml([
        `{name: named, url: '${namedOnly.url}/v1', tls: ${tlsYaml({ caBundle: pki.ca, serverName: 'sim.test' })}}`,
      ]),
      NO_SCRAPE,
    );
    try {
      const answer = await client(sidecar).chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hello' }],
        max_tokens: 4,
      });
      assert.ok(answer.choices.length === 1);
    } finally {
      await stop();
    }
  });

  test('a refused certificate is a clear 502 naming its reason, and the sidecar lives on', async () => {
    const cases = [
      { sim: () => otherCa, reason: /UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER/ },
      { sim: () => wrongName, reason: /ERR_TLS_CERT_ALTNAME_INVALID: Hostname\/IP does not match/ },
      { sim: () => expired, reason: /CERT_HAS_EXPIRED: certificate has expired/ },
    ];
    for (const c of cases) {
      const url = c.sim().url;
      const { sidecar, stop } = await sidecarOn(
        poolYaml([`{name: bad, url: '${url}/v1', tls: ${tlsYaml({ caBundle: pki.ca })}}`], POLICY),
        NO_SCRAPE,
      );
      try {
        const res = await fetch(`${sidecar.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
        });
        const body = (await res.json()) as { error: { code: string; message: string } };
        assert.equal(res.status, 502);
        assert.equal(body.error.code, 'upstream_unreachable');
        assert.match(body.error.message, c.reason);
        await eventually(
          () => /upstream certificate rejected/.test(sidecar.output()),
          10_000,
          'the warning in the log',
        );
        assert.match(sidecar.output(), /"reason":"[A-Z_]+: [^"]+".*certificate rejected/);
        // Alive: its admin answers and the next request is answered too (not a crash).
        assert.equal((await fetch(`${sidecar.adminUrl}/healthz`)).status, 200);
      } finally {
        await stop();
      }
    }
  });

  test('a server that never answers the TLS handshake is a connect timeout, then failed over', async (t) => {
    // Reads the ClientHello as the start of a request that never completes, and stays silent.
    const silent = await startFaultBackend({ parts: [], then: 'stall' });
    const silentUrl = silent.url.replace('http:', 'https:');
    const policy = [
      'mode: Failover',
      'retry: {budgetPercent: 100, minPerSecond: 100, maxAttempts: 2}',
      // A first-byte deadline far beyond the connect timeout: which one fired shows in the 502.
      'timeouts: {connect: 300ms, firstByte: 20s}',
    ];
    const alone = await sidecarOn(
      poolYaml(
        [`{name: silent, url: '${silentUrl}/v1', tls: ${tlsYaml({ caBundle: pki.ca })}}`],
        policy,
      ),
      NO_SCRAPE,
    );
    const pair = await sidecarOn(
      poolYaml(
        [
          `{name: silent, url: '${silentUrl}/v1', tls: ${tlsYaml({ caBundle: pki.ca })}}`,
          `{name: good, url: '${trusted.url}/v1', tls: ${tlsYaml({ caBundle: pki.ca })}}`,
        ],
        policy,
      ),
      NO_SCRAPE,
    );
    try {
      const res = await fetch(`${alone.sidecar.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
      });
      const body = (await res.json()) as { error: { message: string } };
      assert.equal(res.status, 504);
      assert.match(body.error.message, /ECONNECT_TIMEOUT from silent\//);
      const { response } = await client(pair.sidecar)
        .chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 4,
        })
        .withResponse();
      assert.match(response.headers.get('x-switchyard-backend') ?? '', /^good\//);
      assert.equal(response.headers.get('x-switchyard-attempts'), '2');
      assert.equal(silent.requests, 0, 'no request got past the handshake');
      recordFigure(t, {
        fault: 'https: a server that accepts and never answers the TLS handshake, before a peer',
        load: '1 chat alone, 1 chat with a peer',
        lost: 1,
        requests: 2,
        outcome:
          '504 ECONNECT_TIMEOUT after timeouts.connect alone; answered by the peer on the 2nd attempt',
      });
    } finally {
      await alone.stop();
      await pair.stop();
      await silent.close();
    }
  });

  test('refused certificates fail over to a healthy https peer; the client sees no error', async (t) => {
    const bad = [otherCa, wrongName, expired];
    const { sidecar, stop } = await sidecarOn(
      poolYaml(
        [
          `{name: bad, urls: [${bad.map((s) => `'${s.url}/v1'`).join(', ')}], tls: ${tlsYaml({ caBundle: pki.ca })}}`,
          `{name: good, url: '${trusted.url}/v1', tls: ${tlsYaml({ caBundle: pki.ca })}}`,
        ],
        POLICY,
      ),
      NO_SCRAPE,
    );
    try {
      const before = (await simStats(trusted)).requests;
      const openai = client(sidecar);
      const REQUESTS = 30;
      let failed = 0;
      const served = new Map<string, number>();
      await Promise.all(
        Array.from({ length: 3 }, async (_, worker) => {
          for (let i = worker; i < REQUESTS; i += 3) {
            try {
              const { response } = await openai.chat.completions
                .create({
                  model: 'm',
                  messages: [{ role: 'user', content: `q${i}` }],
                  max_tokens: 4,
                })
                .withResponse();
              const backend = (response.headers.get('x-switchyard-backend') ?? '?').split('/')[0]!;
              served.set(backend, (served.get(backend) ?? 0) + 1);
            } catch {
              failed++;
            }
          }
        }),
      );
      assert.equal(failed, 0, 'every request was answered');
      assert.deepEqual([...served.entries()], [['good', REQUESTS]]);
      // The handshake failed before HTTP: the refused servers never saw a request.
      for (const s of bad) assert.equal((await simStats(s)).requests, 0, s.url);
      assert.ok((await simStats(trusted)).requests - before >= REQUESTS);
      // Each refused endpoint's breaker opened: the certificate counted against it.
      const view = await debugBackends(sidecar);
      const badOnes = view.endpoints.filter((e) => e.backend === 'bad');
      assert.equal(badOnes.length, 3);
      for (const e of badOnes) assert.notEqual(e.breaker, 'closed', JSON.stringify(e));
      for (const code of [
        'ERR_TLS_CERT_ALTNAME_INVALID',
        'CERT_HAS_EXPIRED',
        'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
      ])
        assert.match(
          sidecar.output(),
          new RegExp(`"reason":"${code}: [^"]+".*certificate rejected`),
        );
      recordFigure(t, {
        fault: 'https: another CA, another name, expired (3 endpoints) before a healthy peer',
        load: `${REQUESTS} requests, 3 at a time, openai client`,
        lost: failed,
        requests: REQUESTS,
        breakersOpened: badOnes.length,
      });
    } finally {
      await stop();
    }
  });
});
