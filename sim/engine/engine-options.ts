/**
 * The knobs of the engine model. All durations are simulated milliseconds; `speed` divides every
 * one of them to get wall-clock time. `SimOptions` (sim/options.ts) adds what only the HTTP side
 * reads (port, host, name, model, fingerprint) and describes every option for the CLI and the
 * admin API; the engine is given the whole object and reads only these.
 */
export interface EngineOptions {
  /** Concurrent generations (engine batch slots). */
  slots: number;
  /** Requests that may wait for a slot; beyond that the answer is 429 with `Retry-After: 1`. */
  queueLimit: number;
  /** Prefill cost per prompt token that is not in the prefix cache. */
  prefillMsPerToken: number;
  /** Decode cost per output token on an otherwise idle server. */
  decodeMsPerToken: number;
  /** Decode slows by the factor 1 + loadSlowdown × (busySlots − 1) / slots. */
  loadSlowdown: number;
  /** Prefix cache block size in tokens. */
  blockTokens: number;
  /** Prefix cache capacity in blocks (LRU); 0 disables the cache. */
  cacheBlocks: number;
  /** Tokens are estimated as ceil(characters / charsPerToken). */
  charsPerToken: number;
  /** Fraction of generation requests answered 500 at once. */
  errorRate: number;
  /** Fraction of generation requests answered 429 (with `Retry-After: 1`) at once. */
  rateLimitRate: number;
  /** Fraction of generation requests that send headers and then nothing until the client leaves. */
  stallRate: number;
  /** Added before the first prefill of a cold server (the very first request, or after idling). */
  coldStartMs: number;
  /** A server that had no request in a slot for this long is cold again. */
  coldIdleMs: number;
  /** Tokens per SSE chunk after the first (1 = one chunk a token, as engines usually stream). */
  tokensPerChunk: number;
  /**
   * LoRA adapters resident at once (vLLM's `--max-loras`): a request for an adapter that is not
   * resident loads it, evicting the least recently used one no running request uses; when every
   * resident adapter is in use, the request waits in the queue while others go ahead.
   */
  maxLoras: number;
  /** What loading a non-resident adapter costs: its request waits this long before its prefill. */
  loraLoadMs: number;
  /** Time compression: every simulated delay is divided by this. */
  speed: number;
  /** Seed of the fault draws and of the generated text. */
  seed: number;
}
