#!/usr/bin/env node
// The one executable. Node >= 22.19 runs the TypeScript sources directly (type stripping), so a
// checkout needs no build step; the image runs this file compiled (dist/bin/switchyard.js).

// On an older Node, one line saying what to do instead of a type-stripping error. This file must
// stay parseable by old Node for that: no static imports, nothing newer than ES2020 above here.
const [NODE_MAJOR, NODE_MINOR] = process.versions.node.split('.').map(Number);
if (NODE_MAJOR < 22 || (NODE_MAJOR === 22 && NODE_MINOR < 19)) {
  process.stderr.write(
    `switchyard needs Node >= 22.19 (Node 24 LTS); this is ${process.version} at ${process.execPath}. ` +
      'Run it through npm after `npm ci` (npm start, npx switchyard: the project brings Node 24 as ' +
      'its `node` devDependency), or put Node 24 first on PATH (`source scripts/setup-node.sh`).\n',
  );
  process.exit(1);
}

// The long-running servers allocate short-lived objects per request or event; with V8's default
// young generation (semi-spaces of up to 32 MiB on a large machine) a burst of traffic leaves them
// at several times the RSS they need. A 4 MiB cap measured no throughput loss and a far smaller
// footprint for the sidecar (and ~80 MB less for the controller with 500 streams:
// docs/benchmarks.md). Such flags only take effect at process start, so the process replaces
// itself (execve: same PID) once. A cap given by the caller wins, on the command line or in
// NODE_OPTIONS (the injected sidecar sets 2 MiB there: controller/injection/pod-patch.ts).
const SERVER_V8_FLAGS = ['--max-semi-space-size=4'];
if (
  (process.argv[2] === 'sidecar' || process.argv[2] === 'controller') &&
  typeof process.execve === 'function' &&
  process.env.SWITCHYARD_V8_FLAGS !== 'applied' &&
  !process.execArgv.some((flag) => flag.startsWith('--max-semi-space-size')) &&
  !(process.env.NODE_OPTIONS || '').includes('--max-semi-space-size')
) {
  process.execve(
    process.execPath,
    [process.execPath, ...process.execArgv, ...SERVER_V8_FLAGS, ...process.argv.slice(1)],
    { ...process.env, SWITCHYARD_V8_FLAGS: 'applied' },
  );
}
await import('../cli/main.ts');
