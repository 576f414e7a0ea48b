/**
 * What the simulated model says: an answer's length and words. No real text, but the same prompt
 * gets the same answer from every simulator with the same seed, whatever the arrival order, so two
 * routing policies replaying one trace do the same amount of work.
 */
import { mulberry32 } from '../../lib/rng.ts';
import type { RandomFn } from '../../lib/rng.ts';
import { hashString32 } from './hash.ts';

/** Output length when the request sets no maximum: uniform in [MIN, MAX]. */
export const DEFAULT_OUTPUT_MIN = 16;
export const DEFAULT_OUTPUT_MAX = 128;

/** `stop`: the answer ended by itself; `length`: it was cut at the requested maximum. */
export type FinishReason = 'stop' | 'length';

/** Short English-looking words; a generated token is one of them (with a leading space). */
// prettier-ignore
export const WORDS: readonly string[] = [
  'the', 'of', 'and', 'to', 'in', 'is', 'that', 'for', 'it', 'as', 'was', 'with', 'be', 'by',
  'on', 'not', 'this', 'are', 'at', 'from', 'or', 'have', 'an', 'they', 'which', 'one', 'you',
  'were', 'all', 'we', 'can', 'her', 'has', 'there', 'been', 'if', 'more', 'when', 'will',
  'would', 'who', 'so', 'no', 'model', 'token', 'cache', 'route', 'load', 'queue', 'slot', 'yard',
  'switch', 'train', 'track', 'signal', 'fast', 'slow', 'prefix', 'block', 'batch', 'time',
  'data', 'node', 'pod',
];

export class Answer {
  readonly outputTokens: number;
  readonly finish: FinishReason;
  readonly #rng: RandomFn;

  /** `maxTokens` undefined: a pseudo-random length in [DEFAULT_OUTPUT_MIN, DEFAULT_OUTPUT_MAX]. */
  constructor(promptText: string, maxTokens: number | undefined, seed: number) {
    this.#rng = mulberry32((seed ^ hashString32(promptText)) >>> 0);
    this.outputTokens =
      maxTokens ??
      DEFAULT_OUTPUT_MIN + Math.floor(this.#rng() * (DEFAULT_OUTPUT_MAX - DEFAULT_OUTPUT_MIN + 1));
    this.finish = maxTokens === undefined ? 'stop' : 'length';
  }

  /**
   * The text of token `index`: a word, capitalised for the first token, with a leading space for
   * the others. Each call draws from the answer's RNG: call it once per token, in order.
   */
  token(index: number): string {
    const word = WORDS[Math.floor(this.#rng() * WORDS.length)] ?? 'the';
    return index === 0 ? word.charAt(0).toUpperCase() + word.slice(1) : ' ' + word;
  }
}
