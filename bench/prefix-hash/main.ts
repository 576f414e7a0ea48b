/**
 * `npm run bench:prefix-hash`: what prefix affinity costs per request on the proxy's event loop —
 * cutting a prompt into chained block hashes (`promptBlocks`), finding its longest known prefix
 * and recording it (`PrefixIndex`) — for prompts up to 64k characters, beside the JSON.parse the
 * proxy does anyway. Writes bench/results/prefix-hash.json. The target: ≤ 0.2 ms for a
 * 64k-character prompt.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mulberry32 } from '../../lib/rng.ts';
import { time, type Timing } from '../common/micro-timing.ts';
import {
  DEFAULT_BLOCKS_PER_ENDPOINT,
  DEFAULT_PREFIX_MAX_AGE_MS,
  PrefixIndex,
} from '../../sidecar/policy/prefix-index.ts';
import {
  DEFAULT_BLOCK_CHARS,
  DEFAULT_MAX_BLOCKS,
  promptBlocks,
} from '../../sidecar/policy/prompt-blocks.ts';

const OUT = join(dirname(fileURLToPath(import.meta.url)), '../results/prefix-hash.json');
const OPTIONS = { blockChars: DEFAULT_BLOCK_CHARS, maxBlocks: DEFAULT_MAX_BLOCKS, homeChars: 4096 };
const WORDS =
  'the of and to in is prefix cache token endpoint sidecar routing latency queue model'.split(' ');

function text(rng: () => number, chars: number): string {
  let out = '';
  while (out.length < chars) out += WORDS[Math.floor(rng() * WORDS.length)] + ' ';
  return out.slice(0, chars);
}

/** A chat of `turns` user/assistant pairs after a system prompt, `chars` characters in all. */
function chatBody(chars: number, turns: number, rng: () => number): string {
  const per = Math.floor(chars / (2 * turns + 1));
  const messages = [{ role: 'system', content: text(rng, per) }];
  for (let i = 0; i < turns; i++) {
    messages.push(
      { role: 'user', content: text(rng, per) },
      { role: 'assistant', content: text(rng, per) },
    );
  }
  return JSON.stringify({ model: 'm', stream: true, messages });
}

async function main(): Promise<void> {
  const rng = mulberry32(1);
  const rows = [];
  for (const [label, chars, turns] of [
    ['chat 4k characters, 3 turns', 4_096, 3],
    ['chat 16k characters, 6 turns', 16_384, 6],
    ['chat 64k characters, 10 turns', 65_536, 10],
    ['completion 64k characters', 65_536, 0],
    ['chat 256k characters, 20 turns (hashes the first 64k)', 262_144, 20],
  ] as const) {
    const raw =
      turns === 0
        ? JSON.stringify({ model: 'm', prompt: text(rng, chars) })
        : chatBody(chars, turns, rng);
    const body: unknown = JSON.parse(raw);
    const index = new PrefixIndex(
      { blocksPerEndpoint: DEFAULT_BLOCKS_PER_ENDPOINT, maxAgeMs: DEFAULT_PREFIX_MAX_AGE_MS },
      8,
    );
    const blocks = promptBlocks(body, OPTIONS, 64)!;
    let now = 0;
    rows.push({
      prompt: label,
      bodyChars: raw.length,
      blocks: blocks.hashes.length,
      jsonParse: time(500, () => void JSON.parse(raw)),
      promptBlocks: time(2000, () => promptBlocks(body, OPTIONS, 64)),
      indexMatchAndRecord: time(2000, () => {
        index.longestMatch(blocks.hashes, () => true, now);
        index.record(blocks.hashes, `e${now % 8}`, now);
        now += 1;
      }),
      // The steady state of a busy sidecar: every request a new prompt (its blocks new to the
      // index past a shared system prompt), the index full, so each record also evicts.
      indexNewPromptFullIndex: ((): Timing => {
        const variants = Array.from({ length: 4096 }, (_, v) =>
          blocks.hashes.map((h, i) => (i < 4 ? h : (h + (v + 1) * 0x9e3779b1) % 2 ** 52)),
        );
        let v = 0;
        return time(4000, () => {
          const hashes = variants[v++ % variants.length]!;
          index.longestMatch(hashes, () => true, now);
          index.record(hashes, `e${now % 8}`, now);
          now += 1;
        });
      })(),
    });
  }
  const result = {
    node: process.version,
    cpus: (await import('node:os')).cpus().length,
    target: 'promptBlocks p50 ≤ 200 µs for a 64k-character prompt',
    rows,
  };
  mkdirSync(dirname(OUT), { recursive: true });
  writeFileSync(OUT, JSON.stringify(result, null, 2) + '\n');
  for (const r of rows) {
    console.log(
      `${r.prompt.padEnd(56)} blocks ${String(r.blocks).padStart(3)}  promptBlocks p50 ${r.promptBlocks.p50Us} µs p99 ${r.promptBlocks.p99Us} µs  index ${r.indexMatchAndRecord.p50Us} µs, new prompt in a full index ${r.indexNewPromptFullIndex.p50Us} µs p99 ${r.indexNewPromptFullIndex.p99Us} µs  (JSON.parse ${r.jsonParse.p50Us} µs)`,
    );
  }
  console.log(`wrote ${OUT}`);
}

await main();
