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

/** `stop`: the answer ended by itself or on a stop string; `length`: it was cut at a maximum. */
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

/** What bounds an answer besides its own length. */
export interface AnswerLimits {
  /** The request's maximum of output tokens; undefined: the answer's own length. */
  readonly maxTokens: number | undefined;
  /**
   * Output tokens that fit in the context after the prompt (`max_model_len` − prompt tokens), at
   * least 1; undefined: no context limit. An answer cut by it finishes with `length`, as vLLM's is.
   */
  readonly roomTokens?: number | undefined;
  /**
   * Stop strings: the answer ends at the token that completes the first of them it produces, its
   * text cut before that string (vLLM's `stop`, `finish_reason: "stop"`, `stop_reason` the string).
   */
  readonly stop?: readonly string[] | undefined;
}

/** Mixes a choice's index into the seed; choice 0 keeps the seed, so n = 1 answers as before. */
const CHOICE_MIX = 0x9e3779b1;

export class Answer {
  readonly outputTokens: number;
  readonly finish: FinishReason;
  /** The stop string that ended the answer; null when none did. */
  readonly stopReason: string | null;
  readonly #rng: RandomFn;
  /** The tokens' texts when a stop string had to be looked for ahead; otherwise drawn on demand. */
  readonly #texts: string[] | undefined;

  /**
   * `choice` numbers the answers to one request with `n` > 1: each says other words (and, without
   * `maxTokens`, has another length).
   */
  constructor(promptText: string, limits: AnswerLimits, seed: number, choice = 0) {
    this.#rng = mulberry32((seed ^ hashString32(promptText) ^ Math.imul(choice, CHOICE_MIX)) >>> 0);
    const own =
      limits.maxTokens ??
      DEFAULT_OUTPUT_MIN + Math.floor(this.#rng() * (DEFAULT_OUTPUT_MAX - DEFAULT_OUTPUT_MIN + 1));
    const room = limits.roomTokens ?? Number.POSITIVE_INFINITY;
    let length = Math.min(own, room);
    let finish: FinishReason = limits.maxTokens === undefined && own <= room ? 'stop' : 'length';
    let stopReason: string | null = null;
    const stops = (limits.stop ?? []).filter((s) => s !== '');
    if (stops.length > 0) {
      const texts: string[] = [];
      for (let i = 0; i < length; i++) texts.push(this.#draw(i));
      const found = firstStop(texts, stops);
      if (found !== undefined) {
        texts.length = found.tokens;
        cutAt(texts, found.at);
        length = found.tokens;
        finish = 'stop';
        stopReason = found.stop;
      }
      this.#texts = texts;
    }
    this.outputTokens = length;
    this.finish = finish;
    this.stopReason = stopReason;
  }

  /**
   * The text of token `index`: a word, capitalised for the first token, with a leading space for
   * the others (cut short, or empty, where a stop string begins). Call it once per token, in order.
   */
  token(index: number): string {
    return this.#texts?.[index] ?? this.#draw(index);
  }

  #draw(index: number): string {
    const word = WORDS[Math.floor(this.#rng() * WORDS.length)] ?? 'the';
    return index === 0 ? word.charAt(0).toUpperCase() + word.slice(1) : ' ' + word;
  }
}

/**
 * The first stop string the tokens produce: `tokens` is how many it takes to complete it, `at`
 * where it begins in their text. Among strings completed by the same token, the one that begins
 * first.
 */
function firstStop(
  texts: readonly string[],
  stops: readonly string[],
): { tokens: number; at: number; stop: string } | undefined {
  let text = '';
  for (let i = 0; i < texts.length; i++) {
    const before = text.length;
    text += texts[i];
    let best: { at: number; stop: string } | undefined;
    for (const stop of stops) {
      const at = text.indexOf(stop, Math.max(0, before - stop.length + 1));
      if (at >= 0 && (best === undefined || at < best.at)) best = { at, stop };
    }
    if (best !== undefined) return { tokens: i + 1, ...best };
  }
  return undefined;
}

/** Cuts the tokens' texts so that together they end at `at`. */
function cutAt(texts: string[], at: number): void {
  let start = 0;
  for (let i = 0; i < texts.length; i++) {
    const text = texts[i] as string;
    texts[i] = text.slice(0, Math.max(0, at - start));
    start += text.length;
  }
}
