import { createHash } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';
import {
  constants,
  lstatSync,
  readlinkSync,
  realpathSync,
  watch,
  type FSWatcher,
  type Stats,
} from 'node:fs';
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
  // The hash covers the validated document (key *names*, never key values), its name included:
  // a rename alone is a change to apply.
  const hash = createHash('sha256')
    .update(JSON.stringify([validated.pool.metadata.name, validated.pool.spec]))
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

/**
 * The largest pool file read. A valid one is far smaller (at most 64 backends); the cap is what
 * keeps a mistaken or hostile file (a log, a dump) from being read and parsed at all.
 */
export const MAX_POOL_FILE_BYTES = 1024 * 1024;

export type ReadResult = { ok: true; text: string } | { ok: false; problems: ConfigProblem[] };

/**
 * The pool file's text, if it is a regular file within `MAX_POOL_FILE_BYTES`. Opened without
 * blocking, then checked on the open handle: `open()` of a FIFO would block a libuv thread until
 * a writer came (four such reloads and DNS lookups stall), and checking the handle rather than
 * the path leaves no window for a swap in between.
 */
export async function readPoolFileText(path: string): Promise<ReadResult> {
  const fail = (message: string): ReadResult => ({ ok: false, problems: [{ path, message }] });
  let handle: FileHandle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    return fail(`cannot read the pool file: ${(err as Error).message}`);
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile())
      return fail(`not a regular file (${kindOf(stats)}); a pool file must be one`);
    if (stats.size > MAX_POOL_FILE_BYTES) return fail(tooLarge(stats.size));
    // Read one byte past the cap: the file may have grown since the stat.
    const buffer = Buffer.alloc(MAX_POOL_FILE_BYTES + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length > MAX_POOL_FILE_BYTES) return fail(tooLarge(length));
    }
    return { ok: true, text: buffer.toString('utf8', 0, length) };
  } catch (err) {
    return fail(`cannot read the pool file: ${(err as Error).message}`);
  } finally {
    await handle.close();
  }
}

function tooLarge(bytes: number): string {
  return `the file is ${bytes} bytes, over the limit of ${MAX_POOL_FILE_BYTES} bytes (1 MiB) for a pool file`;
}

function kindOf(stats: Stats): string {
  if (stats.isDirectory()) return 'a directory';
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isSocket()) return 'a socket';
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return 'a device';
  return 'not a file';
}

/**
 * Reads and loads a pool file. `parse` is `loadPoolText` at start (nothing is served yet); a
 * running sidecar passes a `PoolFileParser`, which parses on another thread.
 */
export async function loadPoolFile(
  path: string,
  env: Record<string, string | undefined>,
  parse: (
    text: string,
    env: Record<string, string | undefined>,
  ) => LoadResult | Promise<LoadResult> = loadPoolText,
): Promise<LoadResult> {
  const read = await readPoolFileText(path);
  if (!read.ok) return read;
  return parse(read.text, env);
}

export function formatProblems(file: string, problems: readonly ConfigProblem[]): string {
  return [
    `${file} is not a valid pool file (${problems.length} problem${problems.length === 1 ? '' : 's'}):`,
    ...problems.map((p) => `  - ${p.path}: ${p.message}`),
  ].join('\n');
}

/** A change is applied this long after the last write (one save is often several writes)... */
export const RELOAD_DEBOUNCE_MS = 150;
/** ...but never later than this after the first unapplied one, however often the file is written. */
export const RELOAD_MAX_WAIT_MS = 1_000;

/**
 * Calls `onChange` after the pool file changed. Watches directories, not the file, because
 * editors and Kubernetes ConfigMap mounts replace files by renaming (the old inode's watch would
 * go silent): the file's own directory, and the directory of every hop of its symlink chain, so
 * an edit of the target in another directory is seen too. A ConfigMap update swaps the `..data`
 * link, which moves the target: the chain is resolved again after every event.
 */
export function watchPoolFile(
  path: string,
  onChange: () => void,
  debounceMs = RELOAD_DEBOUNCE_MS,
  maxWaitMs = RELOAD_MAX_WAIT_MS,
): { close(): void } {
  const absolute = resolve(path);
  const watchers = new Map<string, FSWatcher>();
  let timer: NodeJS.Timeout | undefined;
  let pendingSinceMs: number | undefined;
  let closed = false;

  const fire = (): void => {
    timer = undefined;
    pendingSinceMs = undefined;
    onChange();
  };
  const changed = (): void => {
    if (closed) return;
    const now = performance.now();
    pendingSinceMs ??= now;
    if (timer !== undefined) clearTimeout(timer);
    timer = setTimeout(fire, Math.max(0, Math.min(debounceMs, pendingSinceMs + maxWaitMs - now)));
    rewatch();
  };
  // The names that matter in each watched directory, as of the latest resolution of the chain.
  // A watcher reads them here at each event, not from when it was made: a link re-pointed to
  // another file of a directory watched already must make that file's edits count.
  let wanted = new Map<string, Set<string>>();
  const rewatch = (): void => {
    wanted = chainOf(absolute);
    for (const [dir, watcher] of watchers) {
      if (wanted.has(dir)) continue;
      watcher.close();
      watchers.delete(dir);
    }
    for (const dir of wanted.keys()) {
      if (watchers.has(dir)) continue;
      try {
        const watcher = watch(dir, { persistent: false }, (_event, file) => {
          const names = wanted.get(dir);
          // ConfigMap mounts swap a `..data` symlink; any such change may be ours.
          if (file !== null && names?.has(file) !== true && !file.startsWith('..')) return;
          changed();
        });
        watcher.on('error', () => undefined);
        watchers.set(dir, watcher);
      } catch {
        // A directory that went away: the next event (or reload) resolves the chain again.
      }
    }
  };
  rewatch();
  return {
    close() {
      closed = true;
      if (timer !== undefined) clearTimeout(timer);
      for (const watcher of watchers.values()) watcher.close();
      watchers.clear();
    },
  };
}

/**
 * Every directory on the way from `path` to the file it finally names, with the entry names
 * that matter in each: the path itself, each symlink's target (relative ones resolved against
 * the link's directory), and the real path (which also resolves links among the directories).
 */
function chainOf(path: string): Map<string, Set<string>> {
  const dirs = new Map<string, Set<string>>();
  const add = (p: string): void => {
    const dir = dirname(p);
    let names = dirs.get(dir);
    if (names === undefined) dirs.set(dir, (names = new Set()));
    names.add(basename(p));
  };
  let current = path;
  for (let hop = 0; hop < 40; hop++) {
    add(current);
    let target: string;
    try {
      if (!lstatSync(current).isSymbolicLink()) break;
      target = readlinkSync(current);
    } catch {
      break;
    }
    current = resolve(dirname(current), target);
  }
  try {
    add(realpathSync(path));
  } catch {
    // Dangling for now: the directories seen so far are watched.
  }
  return dirs;
}
