/**
 * Steady client traffic during a control-plane fault: requests sent back to back, each counted
 * as delivered or failed (with the first failure kept for the assertion message).
 */

export interface TrafficCount {
  sent: number;
  failed: number;
  firstFailure?: string | undefined;
}

export interface Traffic {
  /** Counts so far. */
  count(): TrafficCount;
  /** Stops after the requests in flight; resolves with the final counts. */
  stop(): Promise<TrafficCount>;
}

/**
 * Calls `send` in `concurrency` loops until stopped. `send` resolves true for a delivered
 * request, or a description of what went wrong.
 */
export function keepSending(send: () => Promise<true | string>, concurrency = 1): Traffic {
  const counts: TrafficCount = { sent: 0, failed: 0 };
  let running = true;
  const loops = Array.from({ length: concurrency }, async () => {
    while (running) {
      const result = await send().catch((err: unknown) => String(err));
      counts.sent++;
      if (result !== true) {
        counts.failed++;
        counts.firstFailure ??= result;
      }
    }
  });
  return {
    count: () => ({ ...counts }),
    async stop() {
      running = false;
      await Promise.all(loops);
      return { ...counts };
    },
  };
}

/** Posts a small chat completion for `model` to the sidecar at `baseUrl`. */
export function postChat(baseUrl: string, model = 'm'): Promise<Response> {
  return fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      max_tokens: 3,
      messages: [{ role: 'user', content: 'hi' }],
    }),
  });
}

/** A `send` that posts a small chat completion to `url()` and wants a 200. */
export function chatTo(url: () => string): () => Promise<true | string> {
  return async () => {
    const res = await postChat(url());
    const text = await res.text();
    return res.status === 200 ? true : `${res.status} ${text.slice(0, 200)}`;
  };
}
