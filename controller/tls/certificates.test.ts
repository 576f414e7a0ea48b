import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { pino } from 'pino';
import { planTls } from './plan.ts';
import { createCa, inspectTlsSecret, issueServingCertificate } from './certificates.ts';
import { FileTlsSource, readTlsFiles } from './source.ts';

const NOW = Date.now();
const NAMES = ['switchyard.switchyard-system.svc', '127.0.0.1'];

describe('self-managed certificates', () => {
  it('a new CA and serving certificate are what the plan keeps', async () => {
    const ca = await createCa('switchyard test CA', NOW);
    const serving = await issueServingCertificate(ca, NAMES, NOW);
    const facts = inspectTlsSecret({ ...serving, ...ca });
    assert.equal(planTls(facts, NAMES, NOW).kind, 'keep');
    const cert = new X509Certificate(serving.cert);
    assert.equal(cert.subjectAltName, 'DNS:switchyard.switchyard-system.svc, IP Address:127.0.0.1');
    assert.ok(cert.checkIssued(new X509Certificate(ca.ca)));
    assert.equal(new X509Certificate(ca.ca).ca, true);
    assert.equal(cert.ca, false);
  });

  it('notices a certificate of another CA, and keys that do not belong', async () => {
    const ca = await createCa('one', NOW);
    const other = await createCa('two', NOW);
    const serving = await issueServingCertificate(other, NAMES, NOW);
    const facts = inspectTlsSecret({ ...serving, ...ca });
    assert.equal(facts.serving?.signedByCa, false);
    const wrongKeys = inspectTlsSecret({
      ...serving,
      key: other.caKey,
      ca: ca.ca,
      caKey: other.caKey,
    });
    assert.equal(wrongKeys.serving?.keyMatches, false);
    assert.equal(wrongKeys.ca?.keyMatches, false);
  });

  it('reads garbage as missing', () => {
    assert.deepEqual(inspectTlsSecret({ cert: 'nope', ca: '' }), {
      ca: undefined,
      serving: undefined,
    });
  });
});

describe('certificate files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-tls-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const files = {
    certFile: join(dir, 'tls.crt'),
    keyFile: join(dir, 'tls.key'),
    caFile: join(dir, 'ca.crt'),
  };
  const write = async (): Promise<{ cert: string; ca: string }> => {
    const ca = await createCa('files', Date.now());
    const serving = await issueServingCertificate(ca, ['localhost'], Date.now());
    writeFileSync(files.certFile, serving.cert);
    writeFileSync(files.keyFile, serving.key);
    writeFileSync(files.caFile, ca.ca);
    return { cert: serving.cert, ca: ca.ca };
  };

  it('refuses a key that is not the certificate’s, naming both files', async () => {
    await write();
    const other = await issueServingCertificate(await createCa('x', NOW), ['x'], NOW);
    writeFileSync(join(dir, 'other.key'), other.key);
    assert.throws(
      () => readTlsFiles({ ...files, keyFile: join(dir, 'other.key') }),
      /other\.key is not the private key of .*tls\.crt/,
    );
    assert.throws(() => readTlsFiles({ ...files, certFile: join(dir, 'missing') }), /cannot read/);
  });

  it('serves the certificate itself as its CA when no CA file is given', async () => {
    const { cert } = await write();
    assert.equal(readTlsFiles({ ...files, caFile: undefined }).ca, cert);
  });

  it('picks up new files, and keeps the last good when they are half written', async () => {
    await write();
    const source = new FileTlsSource(files, pino({ level: 'silent' }), 20);
    try {
      const changed = new Promise<string>((resolve) => source.onChange((m) => resolve(m.cert)));
      writeFileSync(files.keyFile, 'garbage'); // half-way through an update
      await new Promise((r) => setTimeout(r, 60));
      assert.throws(() => readTlsFiles(files), /not a PEM private key/);
      const next = await write();
      assert.equal(await changed, next.cert);
      assert.equal(source.current().ca, next.ca);
    } finally {
      source.stop();
    }
  });
});
