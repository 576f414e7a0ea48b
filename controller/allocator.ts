/**
 * Which C allocator this process runs on, for the controller's start-up log: the chart preloads
 * jemalloc into the controller (`controller.allocator`, docs/controller.md#memory-the-allocator),
 * and a person reading a replica's memory needs to know whether that took.
 */
import { readFileSync } from 'node:fs';

export interface AllocatorInUse {
  allocator: 'jemalloc' | 'glibc';
  /** Set when LD_PRELOAD names jemalloc but it is not loaded (a custom image without it). */
  problem?: string;
}

/** From the text of /proc/self/maps and the LD_PRELOAD the process started with. */
export function allocatorFrom(maps: string, ldPreload: string | undefined): AllocatorInUse {
  if (/\/libjemalloc\.so[^\s/]*$/m.test(maps)) return { allocator: 'jemalloc' };
  if (ldPreload?.includes('jemalloc') === true)
    return {
      allocator: 'glibc',
      problem: `LD_PRELOAD names ${ldPreload}, but jemalloc is not loaded (is it in the image?): running on glibc's malloc, which keeps more memory after reconnect storms`,
    };
  return { allocator: 'glibc' };
}

/** This process's allocator; glibc where /proc is not there to say (not Linux). */
export function allocatorInUse(): AllocatorInUse {
  let maps = '';
  try {
    maps = readFileSync('/proc/self/maps', 'utf8');
  } catch {
    // Not Linux: nothing preloaded by the chart.
  }
  return allocatorFrom(maps, process.env.LD_PRELOAD);
}
