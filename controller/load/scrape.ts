/**
 * One scrape of a model server's Prometheus `/metrics` for its load gauges. Never throws: every
 * answer is an outcome the schedule (load/scrape-schedule.ts) knows what to do with.
 */
import { MAX_REPORT_CHARS, parseLoadMetrics } from '../../lib/model-server-load.ts';
import type { ScrapeOutcome } from './scrape-schedule.ts';

/** The Prometheus text format, as Prometheus asks for it (not OpenMetrics: one format to read). */
const ACCEPT = 'text/plain;version=0.0.4;q=1,*/*;q=0.1';

/**
 * Answers that mean "no load metrics here", not "try again soon": the path does not exist (404,
 * 410), needs credentials we do not send (401, 403), or does not take GET (405).
 */
const NO_METRICS_STATUS = new Set([401, 403, 404, 405, 410]);

/** Content types a Prometheus exposition comes in; anything else (HTML, JSON) is not one. */
const EXPOSITION_TYPE = /^(text\/plain|application\/openmetrics-text)\b/i;

export interface ScrapeOptions {
  timeoutMs: number;
  /** Aborts the scrape when the controller stops. */
  signal?: AbortSignal | undefined;
}

/**
 * `GET url` and the load it reports. Redirects are not followed: a scrape never goes to an
 * address other than the endpoint's own. No credentials are sent: vLLM and SGLang serve
 * `/metrics` without the API key, and a provider's key has no business on another path.
 */
export async function scrapeLoad(url: string, options: ScrapeOptions): Promise<ScrapeOutcome> {
  const timeout = AbortSignal.timeout(options.timeoutMs);
  const signal =
    options.signal === undefined ? timeout : AbortSignal.any([timeout, options.signal]);
  try {
    const res = await fetch(url, { headers: { accept: ACCEPT }, redirect: 'manual', signal });
    if (NO_METRICS_STATUS.has(res.status) || (res.status >= 300 && res.status < 400)) {
      await res.body?.cancel();
      return { kind: 'no-metrics', reason: `HTTP ${res.status}` };
    }
    if (!res.ok) {
      await res.body?.cancel();
      return { kind: 'failed', cause: 'error', reason: `HTTP ${res.status}` };
    }
    const type = res.headers.get('content-type');
    if (type !== null && !EXPOSITION_TYPE.test(type)) {
      await res.body?.cancel();
      return { kind: 'no-metrics', reason: `content-type ${type.slice(0, 64)}` };
    }
    const text = await readText(res, MAX_REPORT_CHARS);
    if (text === undefined)
      return { kind: 'no-metrics', reason: `larger than ${MAX_REPORT_CHARS} bytes` };
    const load = parseLoadMetrics(text);
    if (load === undefined) return { kind: 'no-metrics', reason: 'no load gauges' };
    return { kind: 'load', load };
  } catch (err) {
    const e = err as Error & { cause?: { code?: unknown } };
    if (timeout.aborted) return { kind: 'failed', cause: 'timeout', reason: 'timed out' };
    const code = typeof e.cause?.code === 'string' ? e.cause.code : undefined;
    return { kind: 'failed', cause: 'error', reason: code ?? e.message.slice(0, 200) };
  }
}

/** The body as text, or undefined once it grows past `maxBytes` (the rest is not read). */
async function readText(res: Response, maxBytes: number): Promise<string | undefined> {
  if (res.body === null) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    // Leaving the loop cancels the stream (the async iterator's return()).
    if (size > maxBytes) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
