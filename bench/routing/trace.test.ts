import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PromptBuilder, pseudoText } from './prompt.ts';
import { idealHitRate, parseTrace, sampleEvenly, TraceError } from './trace.ts';

const line = (o: Record<string, unknown>): string => JSON.stringify(o);

describe('parseTrace', () => {
  it('reads Mooncake JSON lines, hash ids included', () => {
    const trace = parseTrace(
      [
        line({ timestamp: 40, input_length: 1000, output_length: 5, hash_ids: [0, 1] }),
        '',
        line({ timestamp: 0, input_length: 600, output_length: 3, hash_ids: [0, 2] }),
      ].join('\n'),
    );
    assert.equal(trace.format, 'jsonl');
    assert.equal(trace.blockTokens, 512);
    assert.deepEqual(trace.requests, [
      { atMs: 0, inputTokens: 600, outputTokens: 3, hashIds: [0, 2] },
      { atMs: 40, inputTokens: 1000, outputTokens: 5, hashIds: [0, 1] },
    ]);
  });

  it('reads JSON lines without hash ids, and starts the clock at the first request', () => {
    const trace = parseTrace(line({ timestamp: 500, input_length: 10, output_length: 1 }) + '\n');
    assert.equal(trace.blockTokens, undefined);
    assert.deepEqual(trace.requests, [
      { atMs: 0, inputTokens: 10, outputTokens: 1, hashIds: undefined },
    ]);
  });

  it('reads the Azure CSV, whatever the file is called, with 7 fractional digits', () => {
    const trace = parseTrace(
      'TIMESTAMP,ContextTokens,GeneratedTokens\r\n' +
        '2023-11-16 18:15:46.6805900,374,44\r\n' +
        '2023-11-16 18:15:50.9951690,396,109\r\n',
    );
    assert.equal(trace.format, 'azure-csv');
    assert.equal(trace.requests.length, 2);
    assert.equal(trace.requests[0]!.atMs, 0);
    assert.ok(Math.abs(trace.requests[1]!.atMs - 4314.579) < 0.01);
    assert.deepEqual(
      trace.requests.map((r) => [r.inputTokens, r.outputTokens]),
      [
        [374, 44],
        [396, 109],
      ],
    );
  });

  it('takes the Azure columns by name, in any order', () => {
    const trace = parseTrace(
      'GeneratedTokens,TIMESTAMP,ContextTokens\n7,2023-11-16 18:15:46,100\n',
    );
    assert.deepEqual(trace.requests, [
      { atMs: 0, inputTokens: 100, outputTokens: 7, hashIds: undefined },
    ]);
  });

  for (const [what, text, message] of [
    ['an empty file', '', /line 1: the file is empty/],
    ['an unknown format', 'a,b,c\n1,2,3\n', /line 1: neither JSON lines .* nor an Azure CSV/],
    [
      'bad JSON',
      `${line({ timestamp: 0, input_length: 1, output_length: 1 })}\n{"timestamp": 1,`,
      /line 2: not JSON/,
    ],
    [
      'a missing field',
      line({ timestamp: 0, input_length: 1 }),
      /line 1: output_length must be a whole number/,
    ],
    [
      'a negative timestamp',
      line({ timestamp: -1, input_length: 1, output_length: 1 }),
      /line 1: timestamp must be/,
    ],
    [
      'bad hash ids',
      line({ timestamp: 0, input_length: 1, output_length: 1, hash_ids: [1, 'x'] }),
      /line 1: hash_ids must be/,
    ],
    ['an array line', '[1, 2]', /line 1: neither/],
    [
      'a CSV row too short',
      'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,1,2\n2023-11-16 18:15:47.1,3\n',
      /line 3: expected 3 comma-separated values, found 2/,
    ],
    [
      'a bad CSV time',
      'TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n',
      /line 2: TIMESTAMP must look like/,
    ],
    [
      'a bad CSV count',
      'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,1.5,2\n',
      /line 2: ContextTokens must be a whole number/,
    ],
    ['a header only', 'TIMESTAMP,ContextTokens,GeneratedTokens\n', /the trace has no requests/],
  ] as const) {
    it(`refuses ${what}, naming the line`, () => {
      assert.throws(
        () => parseTrace(text),
        (err: unknown) => err instanceof TraceError && message.test(err.message),
      );
    });
  }
});

describe('prompts from blocks', () => {
  const builder = (seed = 1) => new PromptBuilder({ blockTokens: 4, charsPerToken: 2, seed });

  it('same hash id, same text: shared ids make a shared prefix', () => {
    const b = builder();
    const p1 = b.prompt({ atMs: 0, inputTokens: 12, outputTokens: 1, hashIds: [7, 8, 9] }, 0);
    const p2 = b.prompt({ atMs: 0, inputTokens: 10, outputTokens: 1, hashIds: [7, 8, 3] }, 1);
    assert.equal(p1.length, 24);
    assert.equal(p2.length, 20);
    assert.equal(p1.slice(0, 16), p2.slice(0, 16));
    assert.notEqual(p1.slice(16, 20), p2.slice(16, 20));
    assert.equal(b.block(7), builder().block(7), 'the same in another run with the same seed');
    assert.notEqual(b.block(7), builder(2).block(7), 'another seed, another text');
  });

  it('cuts the last block to input_length, and pads when the ids fall short', () => {
    const b = builder();
    assert.equal(
      b.prompt({ atMs: 0, inputTokens: 5, outputTokens: 1, hashIds: [1, 2] }, 0).length,
      10,
    );
    assert.equal(
      b.prompt({ atMs: 0, inputTokens: 20, outputTokens: 1, hashIds: [1] }, 0).length,
      40,
    );
  });

  it('requests without ids get texts of their own', () => {
    const b = builder();
    const r = { atMs: 0, inputTokens: 50, outputTokens: 1, hashIds: undefined };
    assert.notEqual(b.prompt(r, 0), b.prompt(r, 1));
    assert.equal(b.prompt(r, 3), builder().prompt(r, 3));
  });

  it('texts need no JSON escaping', () => {
    assert.match(pseudoText(42, 500), /^[a-z ]{500}$/);
  });
});

describe('sampling and the ideal hit rate', () => {
  const r = (ids: number[]) => ({ atMs: 0, inputTokens: 1, outputTokens: 1, hashIds: ids });

  it('the single infinite cache hits every block seen before', () => {
    assert.equal(idealHitRate([r([1, 2]), r([1, 3]), r([1, 2, 4])]), 3 / 7);
    assert.equal(idealHitRate([{ ...r([]), hashIds: undefined }]), undefined);
    assert.equal(idealHitRate([r([])]), undefined);
  });

  it('samples every k-th request over the whole trace', () => {
    const all = Array.from({ length: 10 }, (_, i) => ({ ...r([i]), atMs: i }));
    assert.deepEqual(
      sampleEvenly(all, 4).map((x) => x.atMs),
      [0, 3, 6, 9],
    );
    assert.equal(sampleEvenly(all, 0).length, 10);
    assert.equal(sampleEvenly(all, 50).length, 10);
  });
});
