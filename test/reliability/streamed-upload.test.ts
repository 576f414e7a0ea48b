/**
 * A compressed upload passed through (issue 40): the sidecar decodes JSON bodies, so it drops
 * their `Content-Encoding`; a multipart upload streams through as sent, still compressed, so the
 * backend must get its `Content-Encoding` with it, or it reads gzip bytes as the multipart body.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { gunzipSync, gzipSync } from 'node:zlib';
import { sidecarOn, type SidecarOnPool } from '../../harness/pool-file.ts';
import { recordFigure } from './figures.ts';
import { poolYaml } from './fixtures.ts';
import { recorder, type Recorder } from './recorder.ts';

const BOUNDARY = 'switchyard-test-boundary';
const multipart = (): Buffer =>
  Buffer.from(
    `--${BOUNDARY}\r\ncontent-disposition: form-data; name="model"\r\n\r\nm\r\n` +
      `--${BOUNDARY}\r\ncontent-disposition: form-data; name="file"; filename="a.wav"\r\n` +
      `content-type: audio/wav\r\n\r\n${'RIFF'.padEnd(2_000, 'x')}\r\n--${BOUNDARY}--\r\n`,
  );

/** POSTs `body` to the sidecar's transcription route (or `path`); resolves with the status. */
function upload(
  baseUrl: string,
  body: Buffer,
  headers: Record<string, string>,
  path = '/v1/audio/transcriptions',
): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${baseUrl}${path}`, {
      method: 'POST',
      agent: false,
      headers: {
        'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
        'content-length': body.length,
        ...headers,
      },
    });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('a compressed multipart upload streamed through', () => {
  let backend: Recorder;
  let fixture: SidecarOnPool;

  before(async () => {
    backend = await recorder();
    fixture = await sidecarOn(poolYaml([`{name: r, url: '${backend.url}/v1'}`]));
  });
  after(async () => {
    await fixture?.stop();
    await backend?.close();
  });

  test('reaches the backend compressed and with its Content-Encoding', async (t) => {
    const plain = multipart();
    const gzipped = gzipSync(plain);
    assert.equal(await upload(fixture.sidecar.url, gzipped, { 'content-encoding': 'gzip' }), 200);
    const seen = backend.seen.at(-1);
    assert.equal(seen?.url, '/v1/audio/transcriptions');
    assert.equal(seen?.headers['content-encoding'], 'gzip', 'the coding goes with the body');
    assert.equal(seen?.bytes, gzipped.length, 'the body as sent');

    // Uncompressed, it says nothing of a coding.
    assert.equal(await upload(fixture.sidecar.url, plain, {}), 200);
    assert.equal(backend.seen.at(-1)?.headers['content-encoding'], undefined);
    assert.equal(backend.seen.at(-1)?.body, plain.toString('utf8'));
    assert.deepEqual(gunzipSync(gzipped), plain);

    // An opaque body (a stored response's cancel) is passed on as sent too.
    const cancel = gzipSync('{}');
    const path = '/v1/responses/resp_1/cancel';
    const headers = { 'content-encoding': 'gzip', 'content-type': 'application/json' };
    assert.equal(await upload(fixture.sidecar.url, cancel, headers, path), 200);
    assert.equal(backend.seen.at(-1)?.url, path);
    assert.equal(backend.seen.at(-1)?.headers['content-encoding'], 'gzip');
    assert.equal(backend.seen.at(-1)?.bytes, cancel.length);
    recordFigure(t, {
      fault: 'client: gzip-encoded multipart upload',
      load: '1 upload of 2 KB, gzip',
      lost: 0,
      requests: 3,
    });
  });
});
