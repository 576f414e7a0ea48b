// ESLint flat config. The pure cores (scripts/pure-cores.js) must stay deterministic: time and
// randomness come in as parameters, never from globals.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';
import { NOT_PURE, PURE_CORES } from './scripts/pure-cores.js';

const PURE_CORE = PURE_CORES.map((core) => core.path);

export default tseslint.config(
  { ignores: ['node_modules/**', 'coverage/**', 'bench/results/**', 'dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: { ...globals.node },
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          // node:test's describe/test return promises the runner itself awaits.
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] },
          ],
        },
      ],
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_' },
      ],
    },
  },
  {
    // Every app pod runs the sidecar: an ES import of node:http loads undici (lib/node-http.ts);
    // node:https goes the same way so that one rule covers the sidecar's HTTP modules.
    files: ['sidecar/**/*.ts', 'lib/**/*.ts', 'probe/**/*.ts', 'cli/**/*.ts', 'crds/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: ['node:http', 'node:https', 'http', 'https'].map((name) => ({
            name,
            message: `Take ${name} from lib/node-http.ts: an ES import of node:http loads undici.`,
            allowTypeImports: true,
          })),
        },
      ],
    },
  },
  {
    files: PURE_CORE,
    ignores: ['**/*.test.ts', ...NOT_PURE],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['node:*'], message: 'The pure core does no I/O: pass what you need in.' },
          ],
        },
      ],
      'no-restricted-properties': [
        'error',
        {
          object: 'Date',
          property: 'now',
          message: 'Inject a Clock instead of reading the wall clock.',
        },
        { object: 'Math', property: 'random', message: 'Inject an Rng so picks are reproducible.' },
        { object: 'performance', property: 'now', message: 'Inject a Clock instead.' },
      ],
      'no-restricted-globals': [
        'error',
        { name: 'setTimeout', message: 'No timers in the pure core: the I/O shell schedules.' },
        { name: 'setInterval', message: 'No timers in the pure core: the I/O shell schedules.' },
        { name: 'setImmediate', message: 'No timers in the pure core: the I/O shell schedules.' },
        { name: 'queueMicrotask', message: 'No scheduling in the pure core.' },
        { name: 'process', message: 'The pure core reads no process state.' },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "NewExpression[callee.name='Date'][arguments.length=0]",
          message: 'Inject a Clock.',
        },
      ],
    },
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
