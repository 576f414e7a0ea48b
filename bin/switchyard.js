#!/usr/bin/env node
// The one executable. Node >= 22.18 runs the TypeScript sources directly (type stripping),
// so there is no build step between a checkout and a running sidecar.

// The long-running servers allocate short-lived objects per request or event; with V8's default
// young generation (semi-spaces of up to 32 MiB on a large machine) a burst of traffic leaves them
// at several times the RSS they need. A 4 MiB cap measured no throughput loss and a far smaller
// footprint for the sidecar (and ~80 MB less for the controller with 500 streams:
// docs/benchmarks.md). Such flags only take effect at process start, so the process replaces
// itself (execve: same PID) once.
const SERVER_V8_FLAGS = ['--max-semi-space-size=4'];
if (
  (process.argv[2] === 'sidecar' || process.argv[2] === 'controller') &&
  typeof process.execve === 'function' &&
  process.env.SWITCHYARD_V8_FLAGS !== 'applied' &&
  !process.execArgv.some((flag) => flag.startsWith('--max-semi-space-size'))
) {
  process.execve(
    process.execPath,
    [process.execPath, ...process.execArgv, ...SERVER_V8_FLAGS, ...process.argv.slice(1)],
    { ...process.env, SWITCHYARD_V8_FLAGS: 'applied' },
  );
}
await import('../cli/main.ts');
