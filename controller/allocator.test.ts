import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allocatorFrom } from './allocator.ts';

const GLIBC_MAPS = [
  '55d4c0a00000-55d4c0c00000 r-xp 00000000 08:01 123 /usr/local/bin/node',
  '7f1a2b000000-7f1a2b028000 r-xp 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6',
].join('\n');
const JEMALLOC_MAPS = `${GLIBC_MAPS}\n7f1a2c000000-7f1a2c0c0000 r-xp 00000000 08:01 789 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2`;

describe('allocatorFrom', () => {
  it('sees jemalloc when it is mapped', () => {
    assert.deepEqual(allocatorFrom(JEMALLOC_MAPS, '/usr/local/lib/libjemalloc.so.2'), {
      allocator: 'jemalloc',
    });
  });

  it('is glibc with nothing preloaded', () => {
    assert.deepEqual(allocatorFrom(GLIBC_MAPS, undefined), { allocator: 'glibc' });
  });

  it('says so when jemalloc was asked for and is not there', () => {
    const found = allocatorFrom(GLIBC_MAPS, '/usr/local/lib/libjemalloc.so.2');
    assert.equal(found.allocator, 'glibc');
    assert.match(found.problem ?? '', /LD_PRELOAD names \/usr\/local\/lib\/libjemalloc\.so\.2/);
  });
});
