/**
 * ServiceAccount tokens the TokenRequest API will not make: signed here with the test cluster's
 * own service-account key, so the API server verifies them like its own, but with any lifetime
 * (an already expired one, above all). A token forged the same way but still valid is the
 * control that proves the forging is right.
 */
import { createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Cluster } from '../../harness/k8s/cluster.ts';

export interface ForgedTokenOptions {
  namespace: string;
  serviceAccount: string;
  audience: string;
  /** Seconds from now when it expires; negative for an expired token. */
  expiresInSeconds: number;
}

const b64url = (value: unknown): string =>
  Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

export async function forgeServiceAccountToken(
  cluster: Cluster,
  options: ForgedTokenOptions,
): Promise<string> {
  const { namespace, serviceAccount } = options;
  const sa = await cluster.request<{ metadata: { uid: string } }>(
    'GET',
    `/api/v1/namespaces/${namespace}/serviceaccounts/${serviceAccount}`,
  );
  if (sa.status !== 200) throw new Error(`no ServiceAccount ${namespace}/${serviceAccount}`);
  const now = Math.floor(Date.now() / 1000);
  const claims = {
    aud: [options.audience],
    exp: now + options.expiresInSeconds,
    iat: now + Math.min(0, options.expiresInSeconds) - 600,
    nbf: now + Math.min(0, options.expiresInSeconds) - 600,
    iss: cluster.apiAudience,
    sub: `system:serviceaccount:${namespace}:${serviceAccount}`,
    'kubernetes.io': {
      namespace,
      serviceaccount: { name: serviceAccount, uid: sa.body.metadata.uid },
    },
  };
  const signingInput = `${b64url({ alg: 'ES256', typ: 'JWT' })}.${b64url(claims)}`;
  const key = createPrivateKey(readFileSync(join(cluster.dir, 'sa.key')));
  const signature = sign('sha256', Buffer.from(signingInput), { key, dsaEncoding: 'ieee-p1363' });
  return `${signingInput}.${signature.toString('base64url')}`;
}
