/**
 * The sidecar's snapshot cache: the last applied snapshot, so a sidecar restarted while the
 * controller is down still routes. It holds API keys, so it is written owner-only (0600) and
 * atomically (a reader sees the old file or the new one, never half of one).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { parseSnapshot, type PoolSnapshot } from '../../../crds/snapshot.ts';

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
