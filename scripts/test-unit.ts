/**
 * `npm run test:unit`: every unit test, with the pure cores' coverage enforced (95 % of lines and
 * branches). The cores come from scripts/pure-cores.js, the list ESLint reads too.
 */
import { spawnSync } from 'node:child_process';
import { NOT_COVERED, PURE_CORES } from './pure-cores.js';

const TEST_FILES = [
  'lib/**/*.test.ts',
  'sidecar/**/*.test.ts',
  'controller/**/*.test.ts',
  'crds/**/*.test.ts',
  'bench/**/*.test.ts',
  'probe/**/*.test.ts',
  'test/unit/**/*.test.ts',
  'status/**/*.test.ts',
];
const MIN_COVERAGE_PERCENT = 95;

const args = [
  '--test',
  '--experimental-test-coverage',
  ...PURE_CORES.filter((core) => core.coverage).map(
    (core) => `--test-coverage-include=${core.path}`,
  ),
  ...NOT_COVERED.map((glob) => `--test-coverage-exclude=${glob}`),
  `--test-coverage-lines=${MIN_COVERAGE_PERCENT}`,
  `--test-coverage-branches=${MIN_COVERAGE_PERCENT}`,
  ...process.argv.slice(2),
  ...TEST_FILES,
];
const run = spawnSync(process.execPath, args, { stdio: 'inherit' });
process.exitCode = run.status ?? 1;
