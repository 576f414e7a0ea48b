/**
 * The pool file parser's thread (pool-file-parser.ts starts it): YAML parsing, validation and
 * resolution of a large file take hundreds of milliseconds, which on the proxy's thread would
 * stall every stream (docs/configuration.md, "Pool file limits").
 */
import { parentPort } from 'node:worker_threads';
import { loadPoolText } from './pool-file.ts';

export interface ParseRequest {
  id: number;
  text: string;
  env: Record<string, string | undefined>;
}

parentPort?.on('message', (request: ParseRequest) => {
  parentPort?.postMessage({ id: request.id, result: loadPoolText(request.text, request.env) });
});
