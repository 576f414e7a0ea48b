// The pure cores: the code that decides (which endpoint, whether a breaker trips, what snapshot a
// pool gets, what to patch into a pod, when to renew a certificate, how long a simulated request
// takes), with time and randomness passed in. One list, read by eslint.config.js (no `node:*`
// imports, no clock, no Math.random, no timers, no process there) and by scripts/test-unit.ts
// (95 % line and branch coverage). docs/architecture.md ("The pure cores") explains them.
// Plain JavaScript: ESLint loads its config before any TypeScript is set up.

/**
 * `coverage: false` says why an entry is kept pure but its coverage is measured by other tests:
 * the per-file threshold would count generated code or a whole simulator.
 * @type {readonly { path: string; coverage: boolean; why?: string }[]}
 */
export const PURE_CORES = [
  { path: 'lib/rng.ts', coverage: true },
  { path: 'lib/model-server-load.ts', coverage: true },
  { path: 'lib/load-scrape/scrape-schedule.ts', coverage: true },
  { path: 'lib/load-scrape/period.ts', coverage: true },
  { path: 'lib/placement-hashes.ts', coverage: true },
  { path: 'sidecar/policy/**/*.ts', coverage: true },
  { path: 'controller/core/**/*.ts', coverage: true },
  // The pure decisions that live in the controller's feature rooms, beside their shells.
  { path: 'controller/injection/pod-patch.ts', coverage: true },
  { path: 'controller/injection/followed-pools.ts', coverage: true },
  { path: 'controller/injection/config.ts', coverage: true },
  { path: 'controller/tls/plan.ts', coverage: true },
  { path: 'controller/drift/events.ts', coverage: true },
  // The controller command's flags turned into options (the command reads the files).
  { path: 'controller/controller-options.ts', coverage: true },
  {
    path: 'crds/**/*.ts',
    coverage: false,
    why: 'schemas and generated validators; crds/*.test.ts and the fuzz test check their behaviour',
  },
  {
    path: 'sim/engine/**/*.ts',
    coverage: false,
    why: 'the simulator, a test tool; sim/calibration.test.ts checks it against real vLLM',
  },
];

/** Files inside the cores that are not part of them (generators run by hand, test helpers). */
export const NOT_PURE = ['crds/generate.ts', 'crds/check-generated.ts'];
export const NOT_COVERED = ['**/*.test.ts', '**/testing.ts'];
