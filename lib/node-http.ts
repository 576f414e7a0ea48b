/**
 * `node:http` for the long-running servers, taken with `process.getBuiltinModule` instead of an
 * `import`. Why: an ES module import of a built-in makes Node build its namespace by reading every
 * export, and node:http's lazy `WebSocket`/`CloseEvent`/`MessageEvent` getters then load the
 * bundled undici (750 KB of source): about 3 MB of RSS in every sidecar, which never uses it
 * (docs/image.md#memory). Types still come from `import type ... from 'node:http'`. ESLint keeps
 * value imports of node:http out of the sidecar's folders.
 */
import type * as NodeHttp from 'node:http';

export const http: typeof NodeHttp = process.getBuiltinModule('node:http');
