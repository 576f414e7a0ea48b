/**
 * The demo's mixed workload: short classifications that share a few long system prompts, and
 * long summaries where several questions are asked about the same document. The sharing is what
 * prefix affinity can turn into cache hits.
 */
import { mulberry32 } from '../lib/rng.ts';

const WORDS = (
  'the of and to in is that for it as with was on be by this are from or at an which have not ' +
  'model cluster request latency token prefix cache endpoint routing budget policy stream pod ' +
  'service traffic kernel memory batch queue replica region gateway sidecar error retry health'
).split(' ');

function text(rng: () => number, chars: number): string {
  const out: string[] = [];
  let length = 0;
  while (length < chars) {
    const w = WORDS[Math.floor(rng() * WORDS.length)]!;
    out.push(w);
    length += w.length + 1;
  }
  return out.join(' ').slice(0, chars);
}

export interface DemoRequest {
  kind: 'classify' | 'summarise';
  body: {
    model: string;
    stream: true;
    max_tokens: number;
    messages: { role: 'system' | 'user' | 'assistant'; content: string }[];
  };
}

export interface DemoWorkload {
  next(): DemoRequest;
}

export function demoWorkload(seed: number, model = 'demo-model'): DemoWorkload {
  const rng = mulberry32(seed);
  const fixed = mulberry32(7); // the shared texts are the same in every run
  const systemPrompts = [0, 1, 2].map(
    (i) => `You are classifier #${i}. Label the text. ` + text(fixed, 3000),
  );
  const documents = Array.from({ length: 8 }, (_, i) => `Document ${i}. ` + text(fixed, 6000));
  return {
    next(): DemoRequest {
      if (rng() < 0.6) {
        return {
          kind: 'classify',
          body: {
            model,
            stream: true,
            max_tokens: 4,
            messages: [
              { role: 'system', content: systemPrompts[Math.floor(rng() * systemPrompts.length)]! },
              { role: 'user', content: text(rng, 100 + Math.floor(rng() * 200)) },
            ],
          },
        };
      }
      return {
        kind: 'summarise',
        body: {
          model,
          stream: true,
          max_tokens: 40 + Math.floor(rng() * 80),
          messages: [
            {
              role: 'system',
              content: 'You answer questions about the document the user gives you.',
            },
            { role: 'user', content: documents[Math.floor(rng() * documents.length)]! },
            { role: 'assistant', content: 'I have read the document.' },
            {
              role: 'user',
              content: `Summarise part ${1 + Math.floor(rng() * 5)} in two sentences.`,
            },
          ],
        },
      };
    },
  };
}
