import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { resolvePool, tlsFields } from './resolve.ts';
import { checkPemCertificates } from './semantic.ts';
import { validatePool } from './validate.ts';

const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

const doc = (backend: Record<string, unknown>) => ({
  apiVersion: 'switchyard.dev/v1alpha1',
  kind: 'InferencePool',
  metadata: { name: 'chat' },
  spec: { backends: [{ name: 'a', ...backend }] },
});

const errorsOf = (backend: Record<string, unknown>) => {
  const r = validatePool(doc(backend));
  return r.ok ? [] : r.errors.map((e) => `${e.path}: ${e.message}`);
};

describe('spec.backends[].tls', () => {
  it('accepts a CA bundle, a server name and their defaults', () => {
    const r = validatePool(
      doc({ url: 'https://a.example/v1', tls: { caBundle: CA + CA, serverName: 'a.svc' } }),
    );
    assert.ok(r.ok);
    assert.equal(r.pool.spec.backends[0]?.tls?.insecureSkipVerify, false);
    assert.deepEqual(errorsOf({ service: { name: 'vllm', port: 8443 }, tls: {} }), []);
  });

  it('rejects contradictions with the messages of the CRD rules', () => {
    assert.deepEqual(errorsOf({ url: 'http://a.example/v1', tls: { caBundle: CA } }), [
      'spec.backends[0].tls: tls checks the certificates of https endpoints, and this backend has an http:// url or is an inferencePoolRef (plain http): use https:// urls or remove tls',
    ]);
    assert.equal(
      errorsOf({ urls: ['https://a.example/v1', 'http://b.example/v1'], tls: {} }).length,
      1,
    );
    assert.deepEqual(
      errorsOf({
        url: 'https://a.example/v1',
        tls: { caBundle: CA, caSecretRef: { name: 's', key: 'ca.crt' } },
      }),
      [
        'spec.backends[0].tls: caBundle and caSecretRef are two sources for the same CAs: set only one',
      ],
    );
    assert.deepEqual(
      errorsOf({ url: 'https://a.example/v1', tls: { caBundle: CA, insecureSkipVerify: true } }),
      [
        'spec.backends[0].tls.insecureSkipVerify: insecureSkipVerify accepts any certificate, so the CAs of caBundle or caSecretRef would be ignored: set only one of them',
      ],
    );
  });

  it('rejects a bundle without certificates, or with a key in it', () => {
    assert.deepEqual(errorsOf({ url: 'https://a.example/v1', tls: { caBundle: 'hello' } }), [
      'spec.backends[0].tls.caBundle: must hold PEM certificates: one or more -----BEGIN CERTIFICATE----- blocks',
    ]);
    const key = '-----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----\n';
    assert.match(checkPemCertificates(CA + key) ?? '', /holds a EC PRIVATE KEY block/);
    assert.equal(checkPemCertificates(CA), undefined);
  });

  it('a pool file puts the bundle into each endpoint; caSecretRef needs Kubernetes', () => {
    const ok = validatePool(
      doc({
        urls: ['https://a.example/v1', 'https://b.example/v1'],
        tls: { caBundle: CA, serverName: 'llm.example' },
      }),
    );
    assert.ok(ok.ok);
    const resolved = resolvePool(ok.pool, {});
    assert.ok(resolved.ok);
    assert.deepEqual(
      resolved.endpoints.map((e) => e.tls),
      [
        { caBundle: CA, serverName: 'llm.example' },
        { caBundle: CA, serverName: 'llm.example' },
      ],
    );
    const ref = validatePool(
      doc({ url: 'https://a.example/v1', tls: { caSecretRef: { name: 's', key: 'ca.crt' } } }),
    );
    assert.ok(ref.ok);
    const failed = resolvePool(ref.pool, {});
    assert.ok(!failed.ok);
    assert.deepEqual(failed.errors, [
      {
        path: 'spec.backends[0].tls.caSecretRef',
        message: 'needs Kubernetes; a standalone pool file can only use caBundle',
      },
    ]);
  });

  it('tlsFields leaves out what is the default', () => {
    assert.deepEqual(tlsFields(undefined, CA), {});
    assert.deepEqual(tlsFields({ insecureSkipVerify: false }, undefined), {});
    assert.deepEqual(tlsFields({ insecureSkipVerify: true }, undefined), {
      tls: { insecureSkipVerify: true },
    });
  });
});
