/**
 * A prompt cut into blocks, each identified by the hash of everything up to its end: the way
 * vLLM's prefix cache identifies KV blocks (a block's hash chains its parent's), so that two
 * prompts share their first k block hashes exactly when they share that much prefix. The balancer
 * remembers which endpoint it sent which hashes to (`prefix-index.ts`) and sends a request to the
 * endpoint holding its longest known prefix.
 *
 * Blocks are cut every `blockChars` characters inside a message AND at the end of every message.
 * The second rule is what makes conversations work: turn n+1 repeats turn n's messages verbatim
 * and appends new ones, so every block of turn n — including its last, partial one — reappears
 * with the same hash in turn n+1. Blocks cut by position alone would misalign after the first
 * message that does not end on a block boundary.
 *
 * The conversation-stable home: `homeDepth` counts the blocks up to the end of the first user
 * message (capped at `homeChars`). Every turn of a conversation starts with the same system
 * prompt and first user message, so every turn — from any sidecar — gets the same home by
 * rendezvous hashing over that hash, while different conversations (different first messages)
 * spread over the pool.
 *
 * Prompt text never leaves this module: only hashes do.
 */

/** How a prompt is cut; from the pool's affinity policy. */
export interface BlockOptions {
  /** Characters per block inside a message (blocks also end at every message end). */
  blockChars: number;
  /** At most this many blocks are hashed: the rest of a longer prompt is ignored. */
  maxBlocks: number;
  /** The home key covers at most this many characters (`affinity.prefixChars`). */
  homeChars: number;
}

/**
 * 256 characters (about 64 tokens) per block: four of vLLM's 16-token KV blocks. Finer blocks
 * would match a few more characters of a diverging prompt and cost an index entry each; the gain
 * is a few dozen tokens of prefill, against memory the sidecar keeps per endpoint.
 */
export const DEFAULT_BLOCK_CHARS = 256;

/**
 * 256 blocks of 256 characters: the first 64k characters (~16k tokens) of a prompt take part.
 * The Gateway API inference extension's prefix scorer matches at most 256 blocks too; hashing
 * this much stays well under the 0.2 ms target (`npm run bench:prefix-hash`, docs/policy.md §3).
 */
export const DEFAULT_MAX_BLOCKS = 256;

export interface PromptBlocks {
  /** `hashes[i]` identifies the prompt's prefix through block i (a 52-bit integer). */
  readonly hashes: readonly number[];
  /** Characters hashed through block i (cumulative), for "how much matched". */
  readonly ends: readonly number[];
  /** Blocks that make up the conversation-stable home key (≥ 1): `hashes[homeDepth - 1]`. */
  readonly homeDepth: number;
  /**
   * About how many characters come before the prompt's last message: what an earlier turn of the
   * same conversation sent, and its server may still hold (0 or absent for a single message).
   * Counted while hashing, or by string lengths past the hashing cap. The worth of a known prefix
   * is estimated from it (`PrefillExchange`, docs/policy.md §3).
   */
  readonly historyChars?: number;
  /** The prompt went on past the hashing cap (`maxBlocks`): a match through every block may run further. */
  readonly cut?: boolean;
}

/** Separators between role and content, and after every message, as the old affinity key had. */
const FIELD_SEP = 0x1f;
const RECORD_SEP = 0x1e;
/** A non-text content part (an image, audio) contributes its kind and this much of its data. */
const MEDIA_TAIL_CHARS = 256;

/**
 * The running hash: two lanes of xor-multiply-xorshift with different constants over pairs of
 * UTF-16 code units, finalised at each block end with murmur3's mixer into 52 bits (exact in a
 * double, cheap as a Map key). Pairs halve the steps of the hot loop; the pairing follows the
 * text's own segments (role, separators, content), so equal prefixes pair alike.
 * Nothing here needs to resist an adversary: colliding prompts only cost their sender locality.
 */
class BlockHasher {
  #a = 0x811c9dc5;
  #b = 0x9747b28c;
  #charsInBlock = 0;
  #chars = 0;
  readonly hashes: number[] = [];
  readonly ends: number[] = [];
  readonly #options: BlockOptions;
  readonly #maxChars: number;

  constructor(options: BlockOptions) {
    this.#options = options;
    this.#maxChars = options.blockChars * options.maxBlocks;
  }

  get full(): boolean {
    return this.hashes.length >= this.#options.maxBlocks;
  }

  get chars(): number {
    return this.#chars;
  }

  /** Whether hashing stopped before the prompt's end could be known (a cap was reached). */
  get truncated(): boolean {
    return this.full || this.#chars >= this.#maxChars;
  }

  code(c: number): void {
    if (this.full || this.#chars >= this.#maxChars) return;
    this.#a = mixA(this.#a, c);
    this.#b = mixB(this.#b, c);
    this.#chars += 1;
    if (++this.#charsInBlock >= this.#options.blockChars) this.endBlock();
  }

  text(s: string, from = 0): void {
    const blockChars = this.#options.blockChars;
    let i = from;
    const end = Math.min(s.length, from + (this.#maxChars - this.#chars));
    while (i < end && !this.full) {
      // The hot loop, a block at a time: two UTF-16 code units per step, locals only.
      const stop = Math.min(end, i + (blockChars - this.#charsInBlock));
      let a = this.#a;
      let b = this.#b;
      const start = i;
      for (; i + 1 < stop; i += 2) {
        const c = s.charCodeAt(i) | (s.charCodeAt(i + 1) << 16);
        a = mixA(a, c);
        b = mixB(b, c);
      }
      if (i < stop) {
        const c = s.charCodeAt(i);
        a = mixA(a, c);
        b = mixB(b, c);
        i += 1;
      }
      this.#a = a;
      this.#b = b;
      this.#chars += i - start;
      this.#charsInBlock += i - start;
      if (this.#charsInBlock >= blockChars) this.endBlock();
    }
  }

  /** Ends the current block (a message end); nothing happens when it is empty. */
  endBlock(): void {
    if (this.#charsInBlock === 0 || this.full) return;
    this.#charsInBlock = 0;
    const hi = fmix32(this.#a ^ Math.imul(this.#b, 0x85ebca6b));
    const lo = fmix32(this.#b ^ hi);
    this.hashes.push((hi & 0xfffff) * 0x100000000 + lo);
    this.ends.push(this.#chars);
  }
}

/**
 * One step of each lane: FNV-1a's xor-multiply, then an xorshift so that high bits flow back down
 * (a multiply alone only moves information upward, and the upper code unit of a pair would
 * otherwise never reach the low bits). Inlined by V8.
 */
function mixA(h: number, c: number): number {
  const x = Math.imul(h ^ c, 0x01000193);
  return x ^ (x >>> 16);
}

function mixB(h: number, c: number): number {
  const x = Math.imul(h ^ c, 0x5bd1e995);
  return x ^ (x >>> 13);
}

function fmix32(h: number): number {
  let x = h >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

/**
 * The blocks of a request body, or undefined when it has no prompt this can read or the prompt
 * is shorter than `minChars` (too short to be worth a cache hit: such requests are balanced).
 *
 * Reads, in this order:
 * - Chat Completions `{messages}`; Anthropic Messages `{system, messages}` (system first, as the
 *   model sees it): every message's role, name, text content (string or text parts; other parts
 *   count by their kind and the tail of their data), tool calls and tool call id.
 * - Responses `{instructions, input}`: the instructions as a system message, then `input` (a
 *   string is one user message; an array is read as messages).
 * - Completions `{prompt}`: a string, or an array of strings (one message each).
 *
 * Never throws: a body it cannot read simply gets no blocks.
 */
export function promptBlocks(
  body: unknown,
  options: BlockOptions,
  minChars: number,
): PromptBlocks | undefined {
  if (!isRecord(body)) return undefined;
  const hasher = new BlockHasher(options);
  let homeEnd = -1; // chars through the first user message
  let lastStart = 0; // chars before the message read last
  const message = (role: string, visit: () => void): void => {
    lastStart = hasher.chars;
    hasher.text(role);
    hasher.code(FIELD_SEP);
    visit();
    hasher.code(RECORD_SEP);
    hasher.endBlock();
    if (homeEnd < 0 && role === 'user') homeEnd = hasher.chars;
  };
  try {
    if (Array.isArray(body['messages'])) {
      const system = body['system']; // Anthropic: a top-level system prompt
      if (typeof system === 'string' || Array.isArray(system)) {
        message('system', () => content(hasher, system));
      }
      for (const m of body['messages']) {
        if (hasher.full) break;
        if (!isRecord(m)) return undefined;
        const role = typeof m['role'] === 'string' ? m['role'] : '';
        message(role, () => messageBody(hasher, m));
      }
    } else if ('input' in body || 'instructions' in body) {
      const instructions = body['instructions'];
      if (typeof instructions === 'string') message('system', () => hasher.text(instructions));
      const input = body['input'];
      if (typeof input === 'string') message('user', () => hasher.text(input));
      else if (Array.isArray(input)) {
        for (const item of input) {
          if (hasher.full) break;
          if (!isRecord(item)) return undefined;
          const role = typeof item['role'] === 'string' ? item['role'] : String(item['type']);
          message(role, () => messageBody(hasher, item));
        }
      }
    } else {
      const prompt = body['prompt'];
      if (typeof prompt === 'string') message('user', () => hasher.text(prompt));
      else if (Array.isArray(prompt) && prompt.every((p) => typeof p === 'string')) {
        for (const p of prompt) message('user', () => hasher.text(p));
      } else return undefined;
    }
  } catch {
    // A getter or proxy that throws: affinity is an optimisation, the request must go on.
    return undefined;
  }
  if (hasher.hashes.length === 0 || hasher.chars < minChars) return undefined;
  const blocks = {
    hashes: hasher.hashes,
    ends: hasher.ends,
    homeDepth: homeDepthOf(hasher.ends, homeEnd, options.homeChars),
  };
  if (!hasher.truncated) return { ...blocks, historyChars: lastStart };
  return { ...blocks, historyChars: Math.max(lastStart, priorCharsOf(body)), cut: true };
}

/**
 * The characters before a prompt's last message, by string lengths (O(messages), not O(chars)):
 * the messages but the last, a top-level system prompt or instructions. A single prompt string
 * has none before it.
 */
function priorCharsOf(body: Record<string, unknown>): number {
  try {
    const list = Array.isArray(body['messages'])
      ? body['messages']
      : Array.isArray(body['input'])
        ? body['input']
        : Array.isArray(body['prompt'])
          ? body['prompt']
          : [];
    let chars = charsOf(body['system']) + charsOf(body['instructions']);
    for (let i = 0; i < list.length - 1; i++) {
      const m: unknown = list[i];
      chars += isRecord(m)
        ? charsOf(m['content']) + charsOf(m['output']) + charsOf(m['arguments'])
        : charsOf(m);
    }
    return chars;
  } catch {
    return 0;
  }
}

function charsOf(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (!Array.isArray(value)) return 0;
  let chars = 0;
  for (const part of value) {
    if (typeof part === 'string') chars += part.length;
    else if (isRecord(part) && typeof part['text'] === 'string') chars += part['text'].length;
  }
  return chars;
}

/**
 * The blocks through the first user message, but at most `homeChars` characters of them (a
 * first message of a whole document gets its home from the document's start); at least one.
 */
function homeDepthOf(ends: readonly number[], homeEnd: number, homeChars: number): number {
  const limit = homeEnd < 0 ? homeChars : Math.min(homeEnd, homeChars);
  let depth = 0;
  while (depth < ends.length && (ends[depth] as number) <= limit) depth += 1;
  return Math.max(1, depth);
}

function messageBody(hasher: BlockHasher, m: Record<string, unknown>): void {
  if (typeof m['name'] === 'string') {
    hasher.text(m['name']);
    hasher.code(FIELD_SEP);
  }
  content(hasher, m['content']);
  const calls = m['tool_calls'];
  if (Array.isArray(calls)) {
    for (const call of calls) {
      const fn = isRecord(call) ? call['function'] : undefined;
      if (!isRecord(fn)) continue;
      hasher.code(FIELD_SEP);
      if (typeof fn['name'] === 'string') hasher.text(fn['name']);
      if (typeof fn['arguments'] === 'string') hasher.text(fn['arguments']);
    }
  }
  if (typeof m['tool_call_id'] === 'string') hasher.text(m['tool_call_id']);
  // Responses API items that are not messages (function_call, function_call_output).
  if (typeof m['arguments'] === 'string') hasher.text(m['arguments']);
  if (typeof m['output'] === 'string') hasher.text(m['output']);
}

/**
 * Text content: a string, or parts (`text`, `input_text`, `output_text`, Anthropic blocks
 * including `tool_use` and `tool_result`).
 */
function content(hasher: BlockHasher, value: unknown): void {
  if (typeof value === 'string') {
    hasher.text(value);
    return;
  }
  if (!Array.isArray(value)) return; // null: an assistant turn with tool calls only
  for (const part of value) {
    if (!isRecord(part)) continue;
    const text = part['text'];
    if (typeof text === 'string') {
      hasher.text(text);
      hasher.code(FIELD_SEP);
      continue;
    }
    // Anthropic's tool blocks carry a conversation's turns as much as text does: a tool_use's
    // name and input, a tool_result's id and its own content (text or further blocks).
    if (part['type'] === 'tool_use') {
      if (typeof part['name'] === 'string') hasher.text(part['name']);
      hasher.text(JSON.stringify(part['input']) ?? '');
      hasher.code(FIELD_SEP);
      continue;
    }
    if (part['type'] === 'tool_result') {
      if (typeof part['tool_use_id'] === 'string') hasher.text(part['tool_use_id']);
      content(hasher, part['content']);
      hasher.code(FIELD_SEP);
      continue;
    }
    // An image or audio part: its kind and the end of its data (a URL or base64), so different
    // media make different prefixes without hashing megabytes.
    if (typeof part['type'] === 'string') hasher.text(part['type']);
    const data = mediaData(part);
    if (data !== undefined) hasher.text(data, Math.max(0, data.length - MEDIA_TAIL_CHARS));
    hasher.code(FIELD_SEP);
  }
}

function mediaData(part: Record<string, unknown>): string | undefined {
  for (const field of ['image_url', 'input_audio', 'source', 'image', 'file']) {
    const value = part[field];
    if (typeof value === 'string') return value;
    if (isRecord(value)) {
      for (const inner of ['url', 'data', 'file_id']) {
        if (typeof value[inner] === 'string') return value[inner];
      }
    }
  }
  return undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
