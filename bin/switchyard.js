#!/usr/bin/env node
// The one executable. Node >= 22.18 runs the TypeScript sources directly (type stripping),
// so there is no build step between a checkout and a running sidecar.

// The sidecar allocates short-lived objects per request; with V8's default young generation
// (semi-spaces of up to 32 MiB) a burst of traffic leaves it at 3-5x the RSS it needs. A 4 MiB cap
// measured no throughput loss and a far smaller footprint (docs/benchmarks.md). Flags like these
// only take effect at process start, so the process replaces itself (execve: same PID) once.
const SIDECAR_V8_FLAGS = ['--max-semi-space-size=4'];
if (
  process.argv[2] === 'sidecar' &&
  typeof process.execve === 'function' &&
  process.env.SWITCHYARD_V8_FLAGS !== 'applied' &&
  !process.execArgv.some((flag) => flag.startsWith('--max-semi-space-size'))
) {
  process.execve(
    process.execPath,
    [process.execPath, ...process.execArgv, ...SIDECAR_V8_FLAGS, ...process.argv.slice(1)],
    { ...process.env, SWITCHYARD_V8_FLAGS: 'applied' },
  );
}
await import('../cli/main.ts');
