import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { scratchDir } from '../../harness/pool-file.ts';
import { stopAll, type RunningProcess, startSidecar } from '../../harness/processes.ts';
import { debugBackends, rawChat } from '../helpers.ts';

interface Seen {
  authorization: string | undefined;
  model: unknown;
  host: string | undefined;
  switchyardHeaders: string[];
}

/** A backend that records what it was sent and answers a fixed completion. */
async function recordingBackend(
  name: string,
): Promise<{ url: string; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    if (req.method !== 'POST') {
      // The sidecar's load scrape (GET /metrics): no metrics here, like an external provider.
      res.writeHead(404).end();
      return;
    }
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({
        authorization: req.headers.authorization,
        model: (JSON.parse(body) as { model?: unknown }).model,
        host: req.headers.host,
        switchyardHeaders: Object.keys(req.headers).filter((h) => h.startsWith('x-switchyard')),
      });
      const answer = JSON.stringify({
        id: name,
        object: 'chat.completion',
        choices: [
          { index: 0, message: { role: 'assistant', content: name }, finish_reason: 'stop' },
        ],
      });
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(answer),
      });
      res.end(answer);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

describe('per-backend request rewriting', () => {
  const KEY = 'sk-test-9f8e7d6c5b4a';
  let keyed: Awaited<ReturnType<typeof recordingBackend>>;
  let open: Awaited<ReturnType<typeof recordingBackend>>;
  let sidecar: RunningProcess;
  let cleanup: () => Promise<void>;

  before(async () => {
    keyed = await recordingBackend('keyed');
    open = await recordingBackend('open');
    const scratch = await scratchDir();
    cleanup = scratch.cleanup;
    const file = join(scratch.dir, 'pool.yaml');
    await writeFile(
      file,
      `apiVersion: switchyard.dev/v1alpha1
kind: InferencePool
metadata: {name: rewrite}
spec:
  mode: Failover
  backends:
  - {name: keyed, url: '${keyed.url}/v1', apiKeyEnv: PROVIDER_KEY, model: provider-model}
  - {name: open, url: '${open.url}/v1'}
`,
    );
    sidecar = await startSidecar(file, [], { PROVIDER_KEY: KEY });
  });
  after(async () => {
    await stopAll([sidecar]);
    await keyed.close();
    await open.close();
    await cleanup();
  });

  test('sends the backend its own key instead of the client’s, and rewrites the model', async () => {
    const res = await rawChat(
      sidecar.url,
      { model: 'client-model', messages: [{ role: 'user', content: 'hi' }] },
      { authorization: 'Bearer client-secret', 'x-switchyard-backend': 'spoof' },
    );
    assert.equal(res.status, 200);
    const seen = keyed.seen.at(-1)!;
    assert.equal(seen.authorization, `Bearer ${KEY}`);
    assert.equal(seen.model, 'provider-model');
    assert.deepEqual(
      seen.switchyardHeaders,
      [],
      'x-switchyard-* headers from the client are not forwarded',
    );
    assert.equal(seen.host, new URL(keyed.url).host, 'Host is the backend’s own');
  });

  test('forwards the client’s Authorization and model to a backend without a key', async () => {
    // Take the keyed backend out of rotation: it becomes unreachable, so Failover moves on.
    await keyed.close();
    const res = await rawChat(
      sidecar.url,
      { model: 'client-model', messages: [{ role: 'user', content: 'hi' }] },
      { authorization: 'Bearer client-secret' },
    );
    assert.equal(res.status, 200);
    const seen = open.seen.at(-1)!;
    assert.equal(seen.authorization, 'Bearer client-secret');
    assert.equal(seen.model, 'client-model');
  });

  test('never shows the key in the admin API, metrics or logs', async () => {
    const debug = JSON.stringify(await debugBackends(sidecar));
    const metrics = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
    for (const text of [debug, metrics, sidecar.output()])
      assert.ok(!text.includes(KEY), 'the key leaked');
  });
});
