/**
 * `node:http` and `node:https` for the long-running servers and clients, taken with
 * `process.getBuiltinModule` instead of an `import`. Why: an ES module import of a built-in makes
 * Node build its namespace by reading every export, and node:http's lazy
 * `WebSocket`/`CloseEvent`/`MessageEvent` getters then load the bundled undici (750 KB of source):
 * about 3 MB of RSS in every sidecar, which never uses it (docs/image.md#memory). node:https has
 * no such getters today, but it is taken the same way so one rule covers both and a future export
 * cannot bring undici back. Types still come from `import type ... from 'node:http'`. ESLint keeps
 * value imports of both out of the sidecar's folders.
 */
import type * as NodeHttp from 'node:http';
import type * as NodeHttps from 'node:https';
import type * as NodeHttp2 from 'node:http2';

export const http: typeof NodeHttp = process.getBuiltinModule('node:http');
export const https: typeof NodeHttps = process.getBuiltinModule('node:https');
/**
 * node:http2, loaded on first use: only the controller's stream needs it (one HTTP/2 connection per
 * sidecar, lib/dual-http-server.ts), and it costs a process ~1.1 MB of private memory (measured
 * with a full GC before and after), which a sidecar on a pool file should not pay.
 */
export function http2(): typeof NodeHttp2 {
  return process.getBuiltinModule('node:http2');
}
