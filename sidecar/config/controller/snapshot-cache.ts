/**
 * The sidecar's snapshot cache: the last applied snapshot, so a sidecar restarted while the
 * controller is down still routes. It holds API keys, so it is written owner-only (0600) and
 * atomically (a reader sees the old file or the new one, never half of one).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { parseSnapshot, type PoolSnapshot } from '../../../crds/snapshot.ts';
import { describeError } from './describe-error.ts';

export interface SnapshotCacheOptions {
  /** The cache file; without one, nothing is restored or written. */
  file: string | undefined;
  log: Logger;
}

/** The last-known-good snapshot on disk: restored once at start, rewritten after every change. */
export class SnapshotCache {
  readonly #options: SnapshotCacheOptions;
  #closed = false;
  /** The newest snapshot not yet written: writes coalesce, only the newest matters. */
  #writer: LatestFileWriter<PoolSnapshot> | undefined;

  constructor(options: SnapshotCacheOptions) {
    this.#options = options;
  }

  /**
   * The cached snapshot, or undefined: a missing, unreadable, corrupt or invalid cache is logged
   * and ignored (one of another pool, by the applier). Never rejects.
   */
  async restore(): Promise<PoolSnapshot | undefined> {
    const { file, log } = this.#options;
    if (file === undefined) return undefined;
    const result = await readSnapshotCache(file);
    if (this.#closed) return undefined;
    if (!result.ok) {
      if (result.reason === 'missing') log.info({ cacheFile: file }, 'no snapshot cache yet');
      else if (result.reason === 'unreadable')
        log.warn(
          { cacheFile: file, code: result.message },
          'cannot read the snapshot cache; ignored',
        );
      else if (result.reason === 'corrupt')
        log.warn({ cacheFile: file }, 'the snapshot cache is not valid JSON; ignored');
      else
        log.warn(
          { cacheFile: file, errors: result.errors },
          'the snapshot cache is not a valid snapshot; ignored',
        );
      return undefined;
    }
    return result.snapshot;
  }

  /** Writes this snapshot as the new cache, after any write in progress. */
  save(snapshot: PoolSnapshot): void {
    const { file, log } = this.#options;
    if (file === undefined) return;
    this.#writer ??= new LatestFileWriter<PoolSnapshot>(
      file,
      (written) =>
        log.debug({ cacheFile: file, version: written.version }, 'snapshot cache written'),
      (err) =>
        log.warn(
          { cacheFile: file, err: describeError(err) },
          'cannot write the snapshot cache; a restart while the controller is down will start empty',
        ),
    );
    this.#writer.save(snapshot);
  }

  /** Restores nothing from now on; resolves once the writes already asked for are done. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#writer?.idle();
  }
}

/**
 * Writes the latest value it was given to `file` (JSON, atomically, 0600), one write at a time:
 * values given while a write is in progress coalesce into the newest. The snapshot cache and the
 * budget shares beside it are written so.
 */
export class LatestFileWriter<T> {
  readonly #file: string;
  readonly #written: (value: T) => void;
  readonly #failed: (err: unknown) => void;
  #pending: T | undefined;
  #writing: Promise<void> | undefined;

  constructor(file: string, written: (value: T) => void, failed: (err: unknown) => void) {
    this.#file = file;
    this.#written = written;
    this.#failed = failed;
  }

  save(value: T): void {
    this.#pending = value;
    this.#writing ??= (async () => {
      while (this.#pending !== undefined) {
        const next = this.#pending;
        this.#pending = undefined;
        try {
          await writeFileAtomic(this.#file, JSON.stringify(next));
          this.#written(next);
        } catch (err) {
          this.#failed(err);
        }
      }
      this.#writing = undefined;
    })();
  }

  /** Resolves once the writes already asked for are done. */
  async idle(): Promise<void> {
    await this.#writing;
  }
}

export type CacheReadResult =
  | { ok: true; snapshot: PoolSnapshot }
  | { ok: false; reason: 'missing' }
  | { ok: false; reason: 'unreadable'; message: string }
  | { ok: false; reason: 'corrupt' }
  | { ok: false; reason: 'invalid'; errors: { path: string; message: string }[] };

/**
 * Reads and validates a cache file. Never throws. A JSON syntax error is reported without its
 * message: V8 quotes the offending text, which may be an API key.
 */
export async function readSnapshotCache(file: string): Promise<CacheReadResult> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ENOENT') return { ok: false, reason: 'missing' };
    return { ok: false, reason: 'unreadable', message: e.code ?? e.message };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'corrupt' };
  }
  const parsed = parseSnapshot(value);
  if (!parsed.ok) return { ok: false, reason: 'invalid', errors: parsed.errors };
  return { ok: true, snapshot: parsed.value };
}

/**
 * Writes `data` to `file` atomically with `mode`: a temporary file in the same directory
 * (created with that mode, flushed to disk), then a rename over the target. The directory is
 * created (0700) when missing.
 */
export async function writeFileAtomic(file: string, data: string, mode = 0o600): Promise<void> {
  const dir = dirname(file);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  const handle = await open(tmp, 'wx', mode);
  try {
    try {
      // The umask may have narrowed the creation mode; never widened it. Make it exact.
      await handle.chmod(mode);
      await handle.writeFile(data, 'utf8');
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, file);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw err;
  }
}
