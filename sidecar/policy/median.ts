/**
 * The median, used wherever the policy compares one endpoint with "the pool": seeding a new
 * endpoint's EWMA, slow-endpoint detection, and the affinity slowdown check. The median rather
 * than the mean because one pathological endpoint (a 30 s TTFT while it swaps) must not drag the
 * reference up and hide its own slowness, nor make healthy peers look fast.
 */

/**
 * Median of `values` (mean of the two middle values for an even count), or undefined when there
 * is no value. NaN entries are ignored: they carry no ordering and would corrupt the sort.
 */
export function median(values: Iterable<number>): number | undefined {
  const sorted: number[] = [];
  for (const v of values) if (!Number.isNaN(v)) sorted.push(v);
  if (sorted.length === 0) return undefined;
  sorted.sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const upper = sorted[mid] as number;
  return sorted.length % 2 === 1 ? upper : ((sorted[mid - 1] as number) + upper) / 2;
}

/** The first index of ascending `sorted` whose value is not below `value`. */
export function lowerBound(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sorted[mid] as number) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The median of ascending `sorted` without its element at `skip` (equal values are
 * interchangeable), as `median` computes it; undefined when nothing is left.
 */
export function medianWithout(sorted: readonly number[], skip?: number): number | undefined {
  const n = sorted.length - (skip === undefined ? 0 : 1);
  if (n <= 0) return undefined;
  const at = (i: number): number => sorted[skip !== undefined && i >= skip ? i + 1 : i] as number;
  const mid = n >> 1;
  return n % 2 === 1 ? at(mid) : (at(mid - 1) + at(mid)) / 2;
}
