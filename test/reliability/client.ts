/**
 * What the reliability tests read from an answer of harness/ask.ts (a clean break, an error
 * body), and a bounded-concurrency runner for many asks.
 */
import type { Answer } from '../../harness/ask.ts';

/** A stream the upstream broke after its first byte, closed by the sidecar with an SSE error event. */
export const brokenCleanly = (a: Answer): boolean =>
  a.status === 200 &&
  a.ended === 'end' &&
  !a.body.includes('data: [DONE]') &&
  /data: \{"error":\{[^\n]*"code":"upstream_stream_broken"[^\n]*\}\}\n\n$/.test(a.body);

/** The parsed `error` of an OpenAI-shaped error body, or undefined. */
export function errorOf(a: Answer): { code?: string; message?: string; type?: string } | undefined {
  try {
    return (JSON.parse(a.body) as { error?: { code?: string; message?: string } }).error;
  } catch {
    return undefined;
  }
}

/** Runs `count` tasks, `concurrency` at a time; results in task order. */
export async function pool<T>(
  count: number,
  concurrency: number,
  task: (i: number) => Promise<T>,
): Promise<T[]> {
  const results: T[] = new Array<T>(count);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      results[i] = await task(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return results;
}
