/**
 * The simulator's stand-in for a tokenizer: a token is `charsPerToken` characters, and a prompt's
 * full blocks of `blockTokens` tokens are what the prefix cache can hold.
 */
import { blockKeys } from './prefix-cache.ts';
import type { EngineOptions } from './engine-options.ts';

type TokenizerOptions = Pick<EngineOptions, 'charsPerToken' | 'blockTokens'>;

/** The estimated token count of `chars` characters of text. */
export function estimateTokens(chars: number, o: Pick<EngineOptions, 'charsPerToken'>): number {
  return Math.ceil(chars / o.charsPerToken);
}

export interface Prompt {
  readonly tokens: number;
  /** Prefix cache keys of the prompt's full blocks, in order. */
  readonly blockKeys: number[];
}

export function tokenizePrompt(text: string, o: TokenizerOptions): Prompt {
  return {
    tokens: estimateTokens(text.length, o),
    blockKeys: blockKeys(text, o.blockTokens * o.charsPerToken),
  };
}
