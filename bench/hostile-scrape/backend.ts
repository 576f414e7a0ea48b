/**
 * The model server of `npm run bench:hostile-scrape`, as its own process so that serving its page
 * costs the bench's client nothing: answers chat completions at once and serves a `/metrics`
 * page, `normal` (a vLLM-sized page, about 60 KiB) or `huge` (valid, just under the 4 MiB cap,
 * almost all of it histogram buckets the sidecar does not want). Prints its URL.
 */
import { MAX_REPORT_CHARS } from '../../lib/model-server-load.ts';
import { servePage, startHostileBackend } from '../../harness/hostile-backend.ts';
import { metricsPage } from './page.ts';

const kind = process.argv[2] === 'huge' ? 'huge' : 'normal';
const page = metricsPage(kind === 'huge' ? MAX_REPORT_CHARS - 4096 : 60 * 1024);
const backend = await startHostileBackend({ answerDelayMs: 0, metrics: servePage(() => page) });
console.log(backend.url);
