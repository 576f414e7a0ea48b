/**
 * Making and reading the certificates of the self-managed TLS Secret: an ECDSA P-256 CA and a
 * serving certificate signed by it. Reading uses node:crypto; making uses @peculiar/x509 (Node
 * parses X.509 but cannot write it), loaded on first use, so a controller that is given its
 * certificate files never loads it.
 */
import { X509Certificate, createPrivateKey, randomBytes, webcrypto } from 'node:crypto';
import {
  BACKDATE_MS,
  CA_VALIDITY_MS,
  servingValidity,
  type CaFacts,
  type ServingFacts,
  type TlsSecretFacts,
} from './plan.ts';

/** PEM texts; `caKey` only in the self-managed Secret (it signs new serving certificates). */
export interface TlsMaterial {
  cert: string;
  key: string;
  ca: string;
  caKey?: string | undefined;
}

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

function keyMatches(cert: X509Certificate, keyPem: string | undefined): boolean {
  if (keyPem === undefined) return false;
  try {
    return cert.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

function parse(pem: string | undefined): X509Certificate | undefined {
  if (pem === undefined || pem.trim() === '') return undefined;
  try {
    return new X509Certificate(pem);
  } catch {
    return undefined;
  }
}

/** subjectAltName as node prints it (`DNS:a, IP Address:1.2.3.4`) → `DNS:a`, `IP:1.2.3.4`. */
function subjectAltNames(cert: X509Certificate): string[] {
  return (cert.subjectAltName ?? '')
    .split(', ')
    .filter((s) => s !== '')
    .map((s) => s.replace(/^IP Address:/, 'IP:'));
}

/** The facts the TLS plan decides on, from the PEM texts of a Secret's keys. */
export function inspectTlsSecret(data: Partial<TlsMaterial>): TlsSecretFacts {
  const ca = parse(data.ca);
  const serving = parse(data.cert);
  const caFacts: CaFacts | undefined =
    ca === undefined
      ? undefined
      : {
          notBeforeMs: Date.parse(ca.validFrom),
          notAfterMs: Date.parse(ca.validTo),
          isCa: ca.ca,
          keyMatches: keyMatches(ca, data.caKey),
        };
  const servingFacts: ServingFacts | undefined =
    serving === undefined
      ? undefined
      : {
          notBeforeMs: Date.parse(serving.validFrom),
          notAfterMs: Date.parse(serving.validTo),
          subjectAltNames: subjectAltNames(serving),
          signedByCa: ca !== undefined && serving.checkIssued(ca) && serving.verify(ca.publicKey),
          keyMatches: keyMatches(serving, data.key),
        };
  return { ca: caFacts, serving: servingFacts };
}

/** The instant a certificate stops being valid, in ms since the epoch. */
export function certificateNotAfterMs(pem: string): number {
  return Date.parse(new X509Certificate(pem).validTo);
}

async function x509Library(): Promise<typeof import('@peculiar/x509')> {
  // tsyringe, which @peculiar/x509 uses inside, needs the Reflect metadata polyfill first.
  await import('reflect-metadata');
  const x509 = await import('@peculiar/x509');
  x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
  return x509;
}

const serialNumber = (): string => {
  const bytes = randomBytes(16);
  bytes[0]! &= 0x7f; // a positive integer
  return bytes.toString('hex');
};

async function exportKey(
  x509: typeof import('@peculiar/x509'),
  key: webcrypto.CryptoKey,
): Promise<string> {
  return x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY');
}

async function importCaKey(pem: string): Promise<webcrypto.CryptoKey> {
  const der = createPrivateKey(pem).export({ format: 'der', type: 'pkcs8' });
  return webcrypto.subtle.importKey('pkcs8', der, ALGORITHM, false, ['sign']);
}

/** A new CA (ten years) named after `commonName`. */
export async function createCa(
  commonName: string,
  nowMs: number,
): Promise<{ ca: string; caKey: string }> {
  const x509 = await x509Library();
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    name: `CN=${commonName}`,
    notBefore: new Date(nowMs - BACKDATE_MS),
    notAfter: new Date(nowMs + CA_VALIDITY_MS),
    keys,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { ca: cert.toString('pem'), caKey: await exportKey(x509, keys.privateKey) };
}

/** A serving certificate for `names` (DNS names and IP addresses), signed by the CA. */
export async function issueServingCertificate(
  ca: { ca: string; caKey: string },
  names: readonly string[],
  nowMs: number,
): Promise<{ cert: string; key: string }> {
  const x509 = await x509Library();
  const caCert = new x509.X509Certificate(ca.ca);
  const { notBeforeMs, notAfterMs } = servingValidity(certificateNotAfterMs(ca.ca), nowMs);
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
  const isIp = (n: string): boolean => /^[0-9.]+$/.test(n) || n.includes(':');
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: `CN=${names[0] ?? 'switchyard'}`,
    issuer: caCert.subject,
    notBefore: new Date(notBeforeMs),
    notAfter: new Date(notAfterMs),
    publicKey: keys.publicKey,
    signingKey: await importCaKey(ca.caKey),
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(
        names.map((n) => ({ type: isIp(n) ? 'ip' : 'dns', value: n })),
      ),
      await x509.AuthorityKeyIdentifierExtension.create(caCert),
    ],
  });
  return { cert: cert.toString('pem'), key: await exportKey(x509, keys.privateKey) };
}
