/**
 * Stored Responses must not pin their answers (issue 40): each remembered response id used to be
 * a view into its answer's first chunk, so a sidecar kept 32 KiB per Responses answer it had
 * seen, up to its 100,000-id cap (~3.2 GB). Here a real sidecar with a 96 MB old-generation heap
 * relays 5,000 answers whose first chunk is 32 KiB: pinned, they would hold ~160 MB and the
 * process would run out of heap; copied, the ids cost well under a megabyte.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';

const ANSWERS = 5_000;
const OLD_SPACE_MB = 96;
const ANSWER_TEXT = 'x'.repeat(32 * 1024);

/** A backend answering every Responses request with a fresh id and a 32 KiB answer. */
async function responsesBackend(): Promise<{ url: string; close: () => Promise<void> }> {
  let made = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url !== '/v1/responses') {
        res.writeHead(404).end();
        return;
      }
      made++;
      const body = JSON.stringify({
        id: `resp_${made.toString(16).padStart(32, '0')}`,
        object: 'response',
        output: [{ type: 'message', content: [{ type: 'output_text', text: ANSWER_TEXT }] }],
      });
      res.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      });
      res.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

function create(baseUrl: string, agent: http.Agent): Promise<number> {
  const body = JSON.stringify({ model: 'm', input: 'hello' });
  return new Promise((resolve) => {
    const req = http.request(`${baseUrl}/v1/responses`, {
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', () => resolve(0));
    });
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

async function heapUsedMb(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const bytes = /^switchyard_process_nodejs_heap_size_used_bytes (\S+)$/m.exec(text)?.[1];
  return Number(bytes) / 1024 / 1024;
}

describe('stored Responses in a real sidecar', () => {
  let backend: Awaited<ReturnType<typeof responsesBackend>>;
  let fixture: SidecarOnPool;

  before(async () => {
    backend = await responsesBackend();
    fixture = await sidecarOn(poolYaml([`{name: r, url: '${backend.url}/v1'}`]), [], {
      NODE_OPTIONS: `--max-old-space-size=${OLD_SPACE_MB}`,
    });
  });
  after(async () => {
    await fixture?.stop();
    await backend?.close();
  });

  test(`${ANSWERS} answers with 32 KiB first chunks fit a ${OLD_SPACE_MB} MB heap`, async (t) => {
    const { sidecar } = fixture;
    let exited: number | string | undefined;
    void sidecar.exited.then((code) => (exited = code));
    const heapBeforeMb = await heapUsedMb(sidecar.adminUrl!);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
    let next = 0;
    let ok = 0;
    const worker = async (): Promise<void> => {
      while (next < ANSWERS && exited === undefined) {
        next++;
        if ((await create(sidecar.url, agent)) === 200) ok++;
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    agent.destroy();
    assert.equal(exited, undefined, `the sidecar exited:\n${sidecar.output().slice(-1_500)}`);
    assert.equal(ok, ANSWERS, 'every answer relayed');
    const heapAfterMb = await heapUsedMb(sidecar.adminUrl!);
    assert.ok(heapAfterMb < OLD_SPACE_MB, `heap used ${heapAfterMb.toFixed(1)} MB`);
    recordFigure(t, {
      fault: 'client: 5,000 stored Responses with 32 KiB first chunks',
      load: `${ANSWERS} POST /v1/responses, 16 at a time, --max-old-space-size=${OLD_SPACE_MB}`,
      lost: ANSWERS - ok,
      requests: ANSWERS,
      heapBeforeMb: Math.round(heapBeforeMb),
      heapAfterMb: Math.round(heapAfterMb),
    });
  });
});
