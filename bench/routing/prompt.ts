/**
 * Prompts for trace requests. A trace with hash ids gets prompts built from blocks: one fixed
 * pseudo-random text per id (the same id gives the same text in every run with the same seed),
 * concatenated, the last block cut so the prompt has exactly `inputTokens` tokens at
 * `charsPerToken`. Equal ids therefore make equal prompt prefixes, which is what the sidecar's
 * prefix hashing and the simulators' prefix caches see. A trace without ids gets a text of its own
 * per request (no sharing at all: Azure's traces carry none). For chat-shaped replay
 * (conversations.ts) it also makes a later turn's new user text and the stand-in answers.
 */
import { mulberry32 } from '../../lib/rng.ts';
import type { TraceRequest } from './trace.ts';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz      ';

/** `chars` characters of text from `seed` (letters and spaces: nothing JSON must escape). */
export function pseudoText(seed: number, chars: number): string {
  const rng = mulberry32(seed);
  const out = new Array<string>(chars);
  for (let i = 0; i < chars; i++) out[i] = ALPHABET[Math.floor(rng() * ALPHABET.length)]!;
  return out.join('');
}

/** A 32-bit mix of the run's seed and a block or request number. */
function mix(seed: number, n: number, salt: number): number {
  let h = Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(n + salt, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

export class PromptBuilder {
  readonly #blockChars: number;
  readonly #charsPerToken: number;
  readonly #seed: number;
  readonly #blocks = new Map<number, string>();

  constructor(options: { blockTokens: number; charsPerToken: number; seed: number }) {
    this.#blockChars = options.blockTokens * options.charsPerToken;
    this.#charsPerToken = options.charsPerToken;
    this.#seed = options.seed;
  }

  /** The text of one hash id's block (cached: ids recur). */
  block(id: number): string {
    let text = this.#blocks.get(id);
    if (text === undefined) {
      text = pseudoText(mix(this.#seed, id, 1), this.#blockChars);
      this.#blocks.set(id, text);
    }
    return text;
  }

  /** Characters per hash-id block. */
  get blockChars(): number {
    return this.#blockChars;
  }

  /** The prompt of request number `index` of the trace. */
  prompt(request: TraceRequest, index: number): string {
    const chars = Math.max(1, request.inputTokens * this.#charsPerToken);
    if (request.hashIds === undefined || request.hashIds.length === 0)
      return pseudoText(mix(this.#seed, index, 2), chars);
    let text = '';
    for (const id of request.hashIds) {
      if (text.length >= chars) break;
      text += this.block(id);
    }
    // A trace whose ids cover fewer tokens than input_length: pad with the request's own text.
    if (text.length < chars) text += pseudoText(mix(this.#seed, index, 3), chars - text.length);
    return text.slice(0, chars);
  }

  /**
   * `chars` characters of request `index`'s own text from its block `fromBlock` on (what a later
   * turn adds to its conversation), padded with text of its own where its ids run out.
   */
  continuation(request: TraceRequest, index: number, fromBlock: number, chars: number): string {
    let text = '';
    for (const id of (request.hashIds ?? []).slice(fromBlock)) {
      if (text.length >= chars) break;
      text += this.block(id);
    }
    if (text.length < chars) text += pseudoText(mix(this.#seed, index, 3), chars - text.length);
    return text.slice(0, chars);
  }

  /** A deterministic stand-in for request `index`'s answer (a later turn repeats it verbatim). */
  answer(index: number, chars: number): string {
    return pseudoText(mix(this.#seed, index, 4), Math.max(1, chars));
  }
}
