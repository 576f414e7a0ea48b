import assert from 'node:assert/strict';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import type { PoolPlacements } from '../../crds/snapshot.ts';
import type { KubeRaw } from '../kube/kube-raw.ts';
import { createCa, issueServingCertificate } from '../tls/certificates.ts';
import { PlacementPeers } from './placement-peers.ts';
import { PEER_PLACEMENTS_PATH } from './snapshot-server.ts';

/** An unsigned token with the claims of a projected ServiceAccount token (only its claims are read here). */
function token(namespace: string, name: string): string {
  const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString('base64url');
  return `${b64({ alg: 'none' })}.${b64({
    'kubernetes.io': { namespace, serviceaccount: { name, uid: `uid-${name}` } },
  })}.sig`;
}

const OWN = token('sy', 'switchyard');
const BATCH: PoolPlacements = {
  endpoints: ['gpus/10.0.0.7:8000'],
  placements: [{ endpoint: 0, ageMs: 5, hashes: 'AAAAAAAAAQ' }],
};

/** An HTTPS peer on loopback with a certificate of `ca` for a DNS name only (no IP). */
async function peer(
  ca: { ca: string; caKey: string },
  seen: { authorization: string | undefined; body: string }[],
): Promise<https.Server> {
  const material = await issueServingCertificate(ca, ['switchyard.sy.svc'], Date.now());
  const server = https.createServer(material, (req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      if (req.url === PEER_PLACEMENTS_PATH)
        seen.push({ authorization: req.headers.authorization, body });
      res.writeHead(204);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

const urlOf = (s: https.Server): string => `https://127.0.0.1:${(s.address() as AddressInfo).port}`;

describe('PlacementPeers', () => {
  let ours: https.Server;
  let stranger: https.Server;
  let ca: { ca: string; caKey: string };
  const seenOurs: { authorization: string | undefined; body: string }[] = [];
  const seenStranger: { authorization: string | undefined; body: string }[] = [];
  const reviews: string[] = [];
  let peers: PlacementPeers;

  before(async () => {
    ca = await createCa('switchyard', Date.now());
    ours = await peer(ca, seenOurs);
    stranger = await peer(await createCa('someone else', Date.now()), seenStranger);
    const raw = {
      request: (_method: string, _path: string, body: { spec: { token: string } }) => {
        reviews.push(body.spec.token);
        const sa = JSON.parse(
          Buffer.from(body.spec.token.split('.')[1]!, 'base64url').toString('utf8'),
        ) as { 'kubernetes.io': { namespace: string; serviceaccount: { name: string } } };
        const k = sa['kubernetes.io'];
        return Promise.resolve({
          status: {
            authenticated: true,
            user: { username: `system:serviceaccount:${k.namespace}:${k.serviceaccount.name}` },
          },
        });
      },
    } as unknown as KubeRaw;
    peers = new PlacementPeers({
      raw,
      readToken: () => `${OWN}\n`,
      peers: () => [urlOf(ours), urlOf(stranger)],
      ca: () => ca.ca,
      logger: pino({ level: 'silent' }),
    });
  });
  after(() => {
    peers.close();
    ours.close();
    stranger.close();
  });

  it("sends the batches to a peer whose certificate is the controller CA's, whatever its names", async () => {
    peers.forward(new Map([['apps/chat', BATCH]]));
    for (let i = 0; i < 100 && seenOurs.length === 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    assert.equal(seenOurs.length, 1);
    assert.equal(seenOurs[0]?.authorization, `Bearer ${OWN}`);
    assert.deepEqual(JSON.parse(seenOurs[0].body), { pools: { 'apps/chat': BATCH } });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(seenStranger.length, 0, 'a certificate of another CA gets nothing');
  });

  it('accepts only tokens of its own ServiceAccount, asking the API server once per token', async () => {
    assert.equal(await peers.authenticate(`Bearer ${OWN}`), true);
    assert.equal(await peers.authenticate(`Bearer ${OWN}`), true);
    assert.equal(reviews.filter((t) => t === OWN).length, 1, 'cached');
    assert.equal(await peers.authenticate(`Bearer ${token('apps', 'app')}`), false);
    assert.equal(await peers.authenticate(`Bearer ${token('other', 'switchyard')}`), false);
    assert.equal(await peers.authenticate(undefined), false);
  });
});
