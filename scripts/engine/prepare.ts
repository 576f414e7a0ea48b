/**
 * Installs vLLM (scripts/engine/install.sh) and makes the two tiny models and the LoRA adapter
 * (scripts/engine/make-adapter.py) test:engine serves, so
 * that `npm test` can do it while other layers run: on a cold machine the install is ~12 minutes,
 * mostly downloading and unpacking wheels, which overlaps well with tests that use the CPU.
 * A no-op once cached. With SWITCHYARD_ENGINE_TESTS=0 it does nothing (the engine tests skip).
 *
 *   node scripts/engine/prepare.ts
 */
import { engineVenv, tinyModel } from '../../harness/engine/install.ts';
import { tinyAdapter } from '../../harness/engine/lora.ts';

if (process.env['SWITCHYARD_ENGINE_TESTS'] === '0') {
  process.stderr.write('[engine-prepare] SWITCHYARD_ENGINE_TESTS=0: nothing to prepare\n');
} else {
  const started = performance.now();
  const venv = await engineVenv();
  const models = await Promise.all([tinyModel(1), tinyModel(2)]);
  const adapter = await tinyAdapter(1, 1);
  process.stderr.write(
    `[engine-prepare] vLLM in ${venv}, models ${models.join(', ')}, adapter ${adapter} ` +
      `(${((performance.now() - started) / 1000).toFixed(0)} s)\n`,
  );
}
