/**
 * `POST /v1/audio/transcriptions` and `/v1/audio/translations`: multipart uploads (a `file` and
 * form fields), answered as vLLM's Whisper endpoints answer: `{"text", "usage"}` JSON, or plain
 * text with `response_format=text`. The "transcript" is words drawn from a hash of the file's
 * bytes, so the same upload gets the same text from every simulator with the same seed. Served
 * at once, outside the engine: what a router sees of these is the upload, not the decoding.
 */
import { Answer } from '../engine/answer.ts';
import { hashString32 } from '../engine/hash.ts';
import type { Simulator } from '../simulator.ts';
import { badRequest, isApiError, simulatorBug } from './api-error.ts';
import { resolveModel } from './models.ts';
import { sendBadRequest, sendError, sendJson } from './respond.ts';
import type { Exchange, Route } from './route.ts';

/** 16 kHz, 16-bit mono PCM: what the simulated duration of an upload assumes. */
const BYTES_PER_SECOND = 32_000;
/** Spoken words per second of audio, and at most this many words in one transcript. */
const WORDS_PER_SECOND = 2.5;
const MAX_WORDS = 200;

async function transcribe(sim: Simulator, ex: Exchange, body: Buffer): Promise<void> {
  const { req, res } = ex;
  const type = req.headers['content-type'] ?? '';
  if (!type.startsWith('multipart/form-data')) {
    return sendBadRequest(sim, res, badRequest('the body must be multipart/form-data', undefined));
  }
  let form: FormData;
  try {
    form = await new Response(new Uint8Array(body), {
      headers: { 'content-type': type },
    }).formData();
  } catch {
    return sendBadRequest(
      sim,
      res,
      badRequest('the multipart body could not be parsed', undefined),
    );
  }
  const file = form.get('file');
  if (file === null || typeof file === 'string') {
    return sendBadRequest(sim, res, badRequest('file is required', 'file'));
  }
  const requested = form.get('model');
  const model = resolveModel(sim, typeof requested === 'string' ? requested : undefined);
  if (isApiError(model)) return sendBadRequest(sim, res, model);
  const bytes = new Uint8Array(await file.arrayBuffer());
  const seconds = Math.max(1, Math.ceil(bytes.length / BYTES_PER_SECOND));
  const words = Math.min(MAX_WORDS, Math.ceil(seconds * WORDS_PER_SECOND));
  const answer = new Answer(
    String(hashString32(Buffer.from(bytes).toString('latin1'))),
    { maxTokens: words },
    sim.options().seed,
  );
  let text = '';
  for (let i = 0; i < words; i++) text += answer.token(i);
  text += '.';
  const format = form.get('response_format') ?? 'json';
  if (format === 'text') {
    res.writeHead(200, {
      'content-type': 'text/plain; charset=utf-8',
      'content-length': String(Buffer.byteLength(text)),
    });
    res.end(text);
    return;
  }
  sendJson(res, 200, { text, usage: { type: 'duration', seconds } });
}

export function audioRoutes(sim: Simulator): Route[] {
  const route = (path: string): Route => ({
    kind: 'upload',
    path,
    handle: (ex, body) => {
      transcribe(sim, ex, body).catch((err: unknown) => {
        sim.log.warn({ err }, 'transcription failed');
        sendError(ex.res, simulatorBug());
      });
    },
  });
  return [route('/v1/audio/transcriptions'), route('/v1/audio/translations')];
}
