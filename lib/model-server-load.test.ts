import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  LoadMetricsParser,
  MAX_LOAD_SAMPLES,
  MAX_LORA_SERIES,
  MAX_REPORT_CHARS,
  MAX_SAMPLE_LINE_BYTES,
  parseLoadMetrics,
  parseOrcaHeader,
} from './model-server-load.ts';

describe('parseOrcaHeader', () => {
  test("reads vLLM's TEXT form", () => {
    assert.deepEqual(
      parseOrcaHeader(
        'TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=3.0',
      ),
      { kvCacheUsage: 0.4, waiting: 3 },
    );
  });

  test('reads the JSON form, named or at the top level', () => {
    assert.deepEqual(
      parseOrcaHeader(
        'JSON {"named_metrics": {"kv_cache_usage_perc": 0.25, "num_requests_waiting": 1}}',
      ),
      { kvCacheUsage: 0.25, waiting: 1 },
    );
    assert.deepEqual(parseOrcaHeader('JSON {"num_requests_running": 4}'), { running: 4 });
  });

  test('ignores unknown fields, garbage values and other formats', () => {
    assert.deepEqual(
      parseOrcaHeader('TEXT cpu_utilization=0.3, named_metrics.num_requests_waiting=2'),
      {
        waiting: 2,
      },
    );
    assert.equal(parseOrcaHeader('TEXT cpu_utilization=0.3, novalue'), undefined);
    assert.equal(parseOrcaHeader('TEXT named_metrics.num_requests_waiting=abc'), undefined);
    assert.equal(parseOrcaHeader('TEXT named_metrics.num_requests_waiting=-1'), undefined);
    assert.equal(parseOrcaHeader('JSON {bad'), undefined);
    assert.equal(parseOrcaHeader('JSON [1]'), undefined);
    assert.equal(parseOrcaHeader('PROTO abc'), undefined);
    assert.equal(parseOrcaHeader(undefined), undefined);
    assert.equal(parseOrcaHeader('TEXT ' + 'x'.repeat(MAX_REPORT_CHARS)), undefined);
  });

  test('caps a KV usage above 1', () => {
    assert.deepEqual(parseOrcaHeader('TEXT named_metrics.kv_cache_usage_perc=1.7'), {
      kvCacheUsage: 1,
    });
  });
});

const VLLM = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 4.0
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 99.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.75
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1234.0
`;

describe('parseLoadMetrics', () => {
  test("reads vLLM's gauges, summing counts and taking the largest KV usage over engines", () => {
    assert.deepEqual(parseLoadMetrics(VLLM), { running: 5, waiting: 4, kvCacheUsage: 0.75 });
  });

  test("reads SGLang's names, and a timestamp after the value", () => {
    const text =
      'sglang:num_running_reqs{tp_rank="0"} 7 1700000000000\nsglang:num_queue_reqs 2\nsglang:token_usage{tp_rank="0"} 0.1\n';
    assert.deepEqual(parseLoadMetrics(text), { running: 7, waiting: 2, kvCacheUsage: 0.1 });
  });

  test("reads the inter-token latency histogram's sum and count (vLLM, SGLang), summed over engines", () => {
    const vllm = [
      'vllm:num_requests_running{engine="0",model_name="m"} 1.0',
      'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 40.0',
      'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 44.0',
      'vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.38',
      'vllm:inter_token_latency_seconds_count{engine="1",model_name="m"} 6.0',
      'vllm:inter_token_latency_seconds_sum{engine="1",model_name="m"} 0.12',
      'vllm:inter_token_latency_seconds_created{engine="0",model_name="m"} 1.79e+09',
    ].join('\n');
    assert.deepEqual(parseLoadMetrics(vllm), {
      running: 1,
      interTokens: 50,
      interTokenSeconds: 0.5,
    });
    const sglang =
      'sglang:num_queue_reqs 0\nsglang:inter_token_latency_seconds_sum{model_name="m"} 2.5\nsglang:inter_token_latency_seconds_count{model_name="m"} 100\n';
    assert.deepEqual(parseLoadMetrics(sglang), {
      waiting: 0,
      interTokenSeconds: 2.5,
      interTokens: 100,
    });
    const old = [
      'vllm:num_requests_running{model_name="m"} 1.0',
      'vllm:time_per_output_token_seconds_sum{model_name="m"} 0.4',
      'vllm:time_per_output_token_seconds_count{model_name="m"} 20.0',
    ].join('\n');
    assert.deepEqual(parseLoadMetrics(old), {
      running: 1,
      interTokenSeconds: 0.4,
      interTokens: 20,
    });
    // The histogram alone is not load: a server without the gauges reports none.
    assert.equal(
      parseLoadMetrics('vllm:inter_token_latency_seconds_count{engine="0"} 3.0\n'),
      undefined,
    );
  });

  test("reads TensorRT-LLM's labelled metrics", () => {
    const text = [
      'nv_trt_llm_request_metrics{model="m",request_type="scheduled",version="1"} 6',
      'nv_trt_llm_request_metrics{model="m",request_type="waiting",version="1"} 1',
      'nv_trt_llm_request_metrics{model="m",request_type="max",version="1"} 64',
      'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="m"} 0.3',
      'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="m"} 300',
    ].join('\n');
    assert.deepEqual(parseLoadMetrics(text), { running: 6, waiting: 1, kvCacheUsage: 0.3 });
  });

  test('reads the old vLLM name of KV usage', () => {
    assert.deepEqual(parseLoadMetrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.2'), {
      kvCacheUsage: 0.2,
    });
  });

  test('rejects a line whose label set is never closed, rather than reading its last word', () => {
    assert.equal(parseLoadMetrics('vllm:num_requests_waiting{model="x" 5\n'), undefined);
    assert.deepEqual(
      parseLoadMetrics(
        'vllm:num_requests_waiting{model="x" 5\nvllm:num_requests_waiting{model="y"} 2\n',
      ),
      { waiting: 2 },
    );
    // A `}` inside a label value still closes nothing on its own line's end.
    assert.deepEqual(parseLoadMetrics('vllm:num_requests_running{m="a}b"} 3 1700000000\n'), {
      running: 3,
    });
  });

  test('gives undefined for an exposition without load gauges, or one too large', () => {
    assert.equal(parseLoadMetrics('# nothing\nprocess_cpu_seconds_total 3\n'), undefined);
    assert.equal(parseLoadMetrics('vllm:num_requests_running{a="b"} NaN\n'), undefined);
    assert.equal(parseLoadMetrics('vllm:num_requests_running\n'), undefined);
    assert.equal(parseLoadMetrics('x'.repeat(MAX_REPORT_CHARS + 1)), undefined);
  });

  test('property: never throws, and reports only finite, non-negative values', () => {
    fc.assert(
      fc.property(fc.string(), (text) => {
        for (const load of [parseLoadMetrics(text), parseOrcaHeader(text)]) {
          if (load === undefined) continue;
          for (const [k, v] of Object.entries(load))
            if (k === 'loadedAdapters') assert.ok(Array.isArray(v));
            else assert.ok(Number.isFinite(v) && v >= 0);
        }
      }),
    );
  });
});

describe('LoRA adapters in use (vllm:lora_requests_info)', () => {
  // As vLLM writes it: one series per combination reported so far, each set to the time it was.
  const LORA = [
    'vllm:num_requests_running{engine="0",model_name="base"} 2.0',
    '# HELP vllm:lora_requests_info Running stats on lora requests.',
    '# TYPE vllm:lora_requests_info gauge',
    'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql",waiting_lora_adapters=""} 1.7961451e+09',
    'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters="law"} 1.79614523e+09',
    'vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.7961452e+09',
  ].join('\n');

  test('the newest series gives running ∪ waiting', () => {
    assert.deepEqual(parseLoadMetrics(LORA), {
      running: 2,
      loadedAdapters: ['sql', 'chat', 'law'],
    });
  });

  test('labels in any order, escaped values, spaces around names; duplicates once', () => {
    const text = [
      'vllm:num_requests_waiting 0',
      'vllm:lora_requests_info{waiting_lora_adapters="a, b",max_lora="2",running_lora_adapters="q\\"x,a"} 10 1700000000000',
    ].join('\n');
    assert.deepEqual(parseLoadMetrics(text), { waiting: 0, loadedAdapters: ['q"x', 'a', 'b'] });
  });

  test('series of the same time are merged', () => {
    const text = [
      'vllm:num_requests_waiting 0',
      'vllm:lora_requests_info{running_lora_adapters="a",waiting_lora_adapters=""} 5',
      'vllm:lora_requests_info{running_lora_adapters="b",waiting_lora_adapters=""} 5',
      'vllm:lora_requests_info{running_lora_adapters="old",waiting_lora_adapters=""} 4',
    ].join('\n');
    assert.deepEqual(parseLoadMetrics(text)?.loadedAdapters, ['a', 'b']);
  });

  test('none in use is an empty list; no metric leaves the field out', () => {
    const idle =
      'vllm:num_requests_running 0\nvllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 3\n';
    assert.deepEqual(parseLoadMetrics(idle), { running: 0, loadedAdapters: [] });
    assert.deepEqual(parseLoadMetrics('vllm:num_requests_running 0\n'), { running: 0 });
    // Adapters alone are not load.
    assert.equal(
      parseLoadMetrics('vllm:lora_requests_info{running_lora_adapters="a"} 3\n'),
      undefined,
    );
  });

  test('skips lines that are not samples', () => {
    const text = [
      'vllm:num_requests_running 1',
      'vllm:lora_requests_info{running_lora_adapters="unclosed} 9',
      'vllm:lora_requests_info{running_lora_adapters=bare} 9',
      'vllm:lora_requests_info{running_lora_adapters="nan"} NaN',
      'vllm:lora_requests_info{running_lora_adapters="novalue"}',
      'vllm:lora_requests_info{running_lora_adapters="noclose"',
      'vllm:lora_requests_info_other{running_lora_adapters="other"} 99',
      'vllm:lora_requests_info{running_lora_adapters="good"} 1',
      'vllm:lora_requests_info 100',
    ].join('\n');
    // A series without labels is the newest, and names no adapter.
    assert.deepEqual(parseLoadMetrics(text), { running: 1, loadedAdapters: [] });
    assert.deepEqual(parseLoadMetrics(text.split('\n').slice(0, -1).join('\n'))?.loadedAdapters, [
      'good',
    ]);
  });

  test('reads the same adapters however the page is cut into chunks (property)', () => {
    const whole = parseLoadMetrics(LORA);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: LORA.length }), { maxLength: 30 }), (cuts) => {
        const bytes = Buffer.from(LORA);
        const parser = new LoadMetricsParser();
        let at = 0;
        for (const cut of [...cuts].sort((a, b) => a - b)) {
          parser.push(bytes.subarray(at, Math.max(at, cut)));
          at = Math.max(at, cut);
        }
        parser.push(bytes.subarray(at));
        assert.deepEqual(parser.end(), whole);
      }),
    );
  });

  test(`series do not count as load samples; past ${MAX_LORA_SERIES} the adapters are not known`, () => {
    const series = (n: number): string =>
      Array.from(
        { length: n },
        (_, i) => `vllm:lora_requests_info{running_lora_adapters="a${i}"} ${i}\n`,
      ).join('');
    const atCap = parseLoadMetrics(`vllm:num_requests_running 1\n${series(MAX_LORA_SERIES)}`);
    assert.deepEqual(atCap, { running: 1, loadedAdapters: [`a${MAX_LORA_SERIES - 1}`] });
    const over = parseLoadMetrics(`vllm:num_requests_running 1\n${series(MAX_LORA_SERIES + 1)}`);
    assert.deepEqual(over, { running: 1 });
  });
});

describe('LoadMetricsParser', () => {
  const PAGE = [
    '# HELP vllm:num_requests_running running',
    'vllm:num_requests_running{engine="0"} 2',
    `vllm:e2e_request_latency_seconds_bucket{le="1",x="${'y'.repeat(300)}"} 4`,
    'process_cpu_seconds_total 3',
    'vllm:num_requests_waiting{engine="0"} 1',
    'vllm:kv_cache_usage_perc{engine="0"} 0.5',
    'sglang:num_queue_reqs 3',
    'vllm:inter_token_latency_seconds_sum 2',
    'vllm:inter_token_latency_seconds_count 100',
  ].join('\n');
  const inChunks = (text: string, cuts: number[]): ModelServerLoadOrUndefined => {
    const bytes = Buffer.from(text);
    const parser = new LoadMetricsParser();
    let at = 0;
    for (const cut of [...cuts].sort((a, b) => a - b)) {
      parser.push(bytes.subarray(at, Math.max(at, cut)));
      at = Math.max(at, cut);
    }
    parser.push(bytes.subarray(at));
    return parser.end();
  };
  type ModelServerLoadOrUndefined = ReturnType<typeof parseLoadMetrics>;

  test('reads the same load however the page is cut into chunks (property)', () => {
    const whole = parseLoadMetrics(PAGE);
    assert.deepEqual(whole, {
      running: 2,
      waiting: 4,
      kvCacheUsage: 0.5,
      interTokenSeconds: 2,
      interTokens: 100,
    });
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: PAGE.length }), { maxLength: 40 }), (cuts) => {
        assert.deepEqual(inChunks(PAGE, cuts), whole);
      }),
    );
    // Byte by byte.
    assert.deepEqual(
      inChunks(
        PAGE,
        Array.from({ length: PAGE.length }, (_, i) => i),
      ),
      whole,
    );
  });

  test('skips a wanted line longer than MAX_SAMPLE_LINE_BYTES, whole or in pieces', () => {
    const long = `vllm:num_requests_running{x="${'y'.repeat(MAX_SAMPLE_LINE_BYTES)}"} 9\nvllm:num_requests_waiting 1\n`;
    assert.deepEqual(parseLoadMetrics(long), { waiting: 1 });
    assert.deepEqual(inChunks(long, [10, 20, 2000, 4000]), { waiting: 1 });
    assert.deepEqual(inChunks(long, [10, long.length - 40]), { waiting: 1 });
  });

  test(`refuses a page of more than ${MAX_LOAD_SAMPLES} wanted lines, and one over the cap`, () => {
    const many = 'vllm:num_requests_running 1\n'.repeat(MAX_LOAD_SAMPLES + 1);
    const parser = new LoadMetricsParser();
    assert.equal(parser.push(Buffer.from(many)), false);
    assert.match(parser.refused ?? '', /more than 1024 load samples/);
    assert.equal(parser.push(Buffer.from('vllm:num_requests_waiting 1\n')), false);
    assert.equal(parser.end(), undefined);
    // The last line, with no newline, counts too.
    const atEnd = new LoadMetricsParser();
    atEnd.push(Buffer.from('vllm:num_requests_running 1\n'.repeat(MAX_LOAD_SAMPLES)));
    atEnd.push(Buffer.from('vllm:num_requests_running 1'));
    assert.equal(atEnd.end(), undefined);
    const big = new LoadMetricsParser();
    assert.equal(big.push(Buffer.alloc(MAX_REPORT_CHARS + 1, 0x23)), false);
    assert.equal(big.bytes, MAX_REPORT_CHARS + 1);
    assert.equal(big.end(), undefined);
  });

  test('a page of nothing wanted reads as no load, however long its lines', () => {
    const parser = new LoadMetricsParser();
    parser.push(Buffer.from('# a comment that does not end in this chunk'));
    parser.push(Buffer.from(' nor in this one'));
    parser.push(
      Buffer.from(' but here\nprocess_open_fds 3\nvllm:other 1\nvllm:num_requests_running'),
    );
    assert.equal(parser.end(), undefined);
  });
});
