/**
 * Which C allocator a controller process runs with in a benchmark: glibc's malloc (Node's own) or
 * jemalloc preloaded, the way the chart runs the controller (`controller.allocator`,
 * docs/controller.md#memory-the-allocator). The library is Debian's `libjemalloc2`.
 */
import { existsSync } from 'node:fs';
import { arch } from 'node:os';

export type Allocator = 'glibc' | 'jemalloc';
export const ALLOCATORS: readonly Allocator[] = ['glibc', 'jemalloc'];

/**
 * jemalloc's settings for the controller, as the chart sets them: freed pages go back to the
 * kernel at once instead of after jemalloc's default 10 s, so a reconnect storm's TLS buffers do
 * not stay in the replica's RSS (bench:stream-memory measures both).
 */
export const JEMALLOC_CONF = 'dirty_decay_ms:0,muzzy_decay_ms:0';

/** Where the image puts jemalloc (Dockerfile) and the chart preloads it from. */
export const IMAGE_JEMALLOC = '/usr/local/lib/libjemalloc.so.2';

/** Where Debian (and most distributions) put libjemalloc.so.2 for this machine's architecture. */
export function jemallocLibrary(): string | undefined {
  const triplet = arch() === 'arm64' ? 'aarch64-linux-gnu' : 'x86_64-linux-gnu';
  return [
    `/usr/lib/${triplet}/libjemalloc.so.2`,
    '/usr/lib64/libjemalloc.so.2',
    '/usr/local/lib/libjemalloc.so.2',
  ].find((path) => existsSync(path));
}

/** The environment a process needs to run with `allocator`; throws, saying what to install. */
export function allocatorEnv(allocator: Allocator): Record<string, string> {
  if (allocator === 'glibc') return {};
  const library = jemallocLibrary();
  if (library === undefined)
    throw new Error(
      'jemalloc is not installed (apt-get install libjemalloc2): needed for --allocator jemalloc',
    );
  return { LD_PRELOAD: library, MALLOC_CONF: JEMALLOC_CONF };
}

/** Parses an allocator name from a flag; undefined if it is none of them. */
export function parseAllocator(value: string): Allocator | undefined {
  return ALLOCATORS.find((a) => a === value);
}
