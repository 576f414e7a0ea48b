import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { parsePoolYaml } from '../../crds/pool-document.ts';
import { resolvePool } from '../../crds/resolve.ts';
import { validatePool } from '../../crds/validate.ts';
import type { PoolConfig } from './active-pool.ts';

export interface ConfigProblem {
  path: string;
  message: string;
}

export type LoadResult = { ok: true; pool: PoolConfig } | { ok: false; problems: ConfigProblem[] };

/** Parses, validates and resolves pool file text: every problem is listed, none is thrown. */
export function loadPoolText(text: string, env: Record<string, string | undefined>): LoadResult {
  const parsed = parsePoolYaml(text);
  if (!parsed.ok) return { ok: false, problems: parsed.errors };
  const validated = validatePool(parsed.document);
  if (!validated.ok) return { ok: false, problems: validated.errors };
  const resolved = resolvePool(validated.pool, env);
  if (!resolved.ok) return { ok: false, problems: resolved.errors };
  // The hash covers the validated document (key *names*, never key values).
  const hash = createHash('sha256')
    .update(JSON.stringify(validated.pool.spec))
    .digest('hex')
    .slice(0, 16);
  return {
    ok: true,
    pool: {
      name: validated.pool.metadata.name,
      hash,
      policy: resolved.policy,
      endpoints: resolved.endpoints,
      timeouts: resolved.timeouts,
    },
  };
}

export async function loadPoolFile(
  path: string,
  env: Record<string, string | undefined>,
): Promise<LoadResult> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    return {
      ok: false,
      problems: [{ path, message: `cannot read the pool file: ${(err as Error).message}` }],
    };
  }
  return loadPoolText(text, env);
}

export function formatProblems(file: string, problems: readonly ConfigProblem[]): string {
  return [
    `${file} is not a valid pool file (${problems.length} problem${problems.length === 1 ? '' : 's'}):`,
    ...problems.map((p) => `  - ${p.path}: ${p.message}`),
  ].join('\n');
}

/**
 * Calls `onChange` after the pool file changed. Watches the directory, not the file, because
 * editors and Kubernetes ConfigMap mounts replace files by renaming (the old inode's watch would
 * go silent). Changes are debounced so one save is one reload.
 */
export function watchPoolFile(
  path: string,
  onChange: () => void,
  debounceMs = 150,
): { close(): void } {
  const absolute = resolve(path);
  const dir = dirname(absolute);
  const name = basename(absolute);
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(dir, { persistent: false }, (_event, file) => {
    // ConfigMap mounts swap a `..data` symlink; any change in the directory may be ours.
    if (file !== null && file !== name && !file.startsWith('..')) return;
    if (timer !== undefined) clearTimeout(timer);
    timer = setTimeout(onChange, debounceMs);
  });
  watcher.on('error', () => undefined);
  return {
    close() {
      if (timer !== undefined) clearTimeout(timer);
      watcher.close();
    },
  };
}
