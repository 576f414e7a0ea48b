/**
 * One scrape of a model server's Prometheus `/metrics` for its load gauges. Never throws: every
 * answer is an outcome the schedule (scrape-schedule.ts) knows what to do with.
 */
import type { AgentOptions, ClientRequest } from 'node:http';
import { http, https } from '../node-http.ts';
import { LoadMetricsParser } from '../model-server-load.ts';
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
  /** Aborts the scrape when the monitor stops. */
  signal?: AbortSignal | undefined;
}

/**
 * Keep-alive, one connection per server: ten scrapes a second then reuse its connection instead
 * of leaving ten TIME_WAIT sockets per server per second (tens of thousands a minute at a large
 * pool). With node:http rather than fetch, so a sidecar never loads undici (megabytes of RSS in
 * every pod).
 */
const AGENT_OPTIONS = { keepAlive: true, maxSockets: 1, maxFreeSockets: 1, scheduling: 'lifo' };
const httpAgent = new http.Agent(AGENT_OPTIONS as AgentOptions);
const httpsAgent = new https.Agent(AGENT_OPTIONS as AgentOptions);

/**
 * `GET url` and the load it reports. Redirects are not followed: a scrape never goes to an
 * address other than the endpoint's own. No credentials are sent: vLLM and SGLang serve
 * `/metrics` without the API key, and a provider's key has no business on another path.
 */
export function scrapeLoad(url: string, options: ScrapeOptions): Promise<ScrapeOutcome> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (outcome: ScrapeOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      resolve(outcome);
    };
    const secure = url.startsWith('https:');
    let req: ClientRequest;
    try {
      req = (secure ? https : http).get(url, {
        headers: { accept: ACCEPT },
        agent: secure ? httpsAgent : httpAgent,
      });
    } catch (err) {
      resolve({ kind: 'failed', cause: 'error', reason: String(err).slice(0, 200) });
      return;
    }
    const timer = setTimeout(() => {
      done({ kind: 'failed', cause: 'timeout', reason: 'timed out' });
      req.destroy();
    }, options.timeoutMs);
    const onAbort = (): void => {
      done({ kind: 'failed', cause: 'error', reason: 'stopped' });
      req.destroy();
    };
    if (options.signal?.aborted === true) return onAbort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    req.on('error', (err: NodeJS.ErrnoException) =>
      done({ kind: 'failed', cause: 'error', reason: err.code ?? err.message.slice(0, 200) }),
    );
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      const type = res.headers['content-type'];
      const early = earlyOutcome(status, type);
      if (early !== undefined) {
        // Drained, not destroyed: the connection goes back to the agent for the next scrape.
        res.resume();
        done(early);
        return;
      }
      // Read as it arrives, the wanted lines only (model-server-load.ts, LoadMetricsParser): a
      // page is never held or decoded whole, so a large one costs a scan, not the proxy's time.
      const parser = new LoadMetricsParser();
      res.on('data', (chunk: Buffer) => {
        if (parser.push(chunk)) return;
        done({ kind: 'no-metrics', reason: parser.refused ?? 'refused', bytes: parser.bytes });
        req.destroy();
      });
      res.on('error', (err: NodeJS.ErrnoException) =>
        done({ kind: 'failed', cause: 'error', reason: err.code ?? err.message.slice(0, 200) }),
      );
      res.on('end', () => {
        const load = parser.end();
        done(
          load === undefined
            ? { kind: 'no-metrics', reason: 'no load gauges', bytes: parser.bytes }
            : { kind: 'load', load, bytes: parser.bytes },
        );
      });
    });
  });
}

/** What the status line and content type alone say, or undefined when the body must be read. */
function earlyOutcome(status: number, type: string | undefined): ScrapeOutcome | undefined {
  if (NO_METRICS_STATUS.has(status) || (status >= 300 && status < 400))
    return { kind: 'no-metrics', reason: `HTTP ${status}` };
  if (status < 200 || status >= 300)
    return { kind: 'failed', cause: 'error', reason: `HTTP ${status}` };
  if (type !== undefined && !EXPOSITION_TYPE.test(type))
    return { kind: 'no-metrics', reason: `content-type ${type.slice(0, 64)}` };
  return undefined;
}
