/**
 * The simulator's load reports, in the forms the model servers it imitates use (the Gateway API
 * inference extension's model server protocol names the gauges):
 *
 * - `GET /metrics`, Prometheus text: vLLM's `vllm:num_requests_running`,
 *   `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` gauges and its prefix cache counters
 *   `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total` (in tokens), labelled
 *   `engine="0"` and `model_name`; or SGLang's `sglang:num_running_reqs`, `sglang:num_queue_reqs`,
 *   `sglang:token_usage` and `sglang:cache_hit_rate`; and each engine's inter-token latency
 *   histogram (`vllm:inter_token_latency_seconds`, `sglang:inter_token_latency_seconds`), whose
 *   `_sum` and `_count` tell a scraper how fast the server generates.
 * - The ORCA `endpoint-load-metrics` header, which vLLM adds to a NON-streaming 200 answer when the
 *   request carries `endpoint-load-metrics-format: TEXT` or `JSON` (a streaming answer has none:
 *   its headers are sent before the work), with `kv_cache_usage_perc` and `num_requests_waiting`.
 *   SGLang sends none.
 */
import type { HistogramSnapshot } from '../engine/histogram.ts';
import type { Simulator } from '../simulator.ts';
import type { Route } from './route.ts';
import { ANY_MODEL_NAME } from './models.ts';

/** The Prometheus text of the simulator's load, under its engine's names. */
export function metricsText(sim: Simulator): string {
  const o = sim.options();
  const load = sim.engine.load();
  const counters = sim.engine.counters();
  const model = (o.model ?? ANY_MODEL_NAME).replace(/["\\\n]/g, '_');
  const blockTokens = o.blockTokens;
  const queriedTokens = (counters.cacheHitBlocks + counters.cacheMissBlocks) * blockTokens;
  const hitTokens = counters.cacheHitBlocks * blockTokens;
  const lines: string[] = [];
  const histogram = (name: string, help: string, labels: string, h: HistogramSnapshot) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
    // prometheus_client's order: le after the other labels, +Inf last, then count and sum.
    h.bounds.forEach((bound, i) =>
      lines.push(
        `${name}_bucket{${labels},le="${pythonFloat(bound)}"} ${pythonFloat(h.cumulative[i] ?? 0)}`,
      ),
    );
    lines.push(
      `${name}_bucket{${labels},le="+Inf"} ${pythonFloat(h.count)}`,
      `${name}_count{${labels}} ${pythonFloat(h.count)}`,
      `${name}_sum{${labels}} ${pythonFloat(h.sum)}`,
    );
  };
  const itl = sim.engine.interTokenLatency();
  const metric = (name: string, type: string, help: string, labels: string, value: number) => {
    lines.push(
      `# HELP ${name} ${help}`,
      `# TYPE ${name} ${type}`,
      `${name}{${labels}} ${pythonFloat(value)}`,
    );
  };
  if (o.engine === 'sglang') {
    const labels = `model_name="${model}"`;
    metric(
      'sglang:num_running_reqs',
      'gauge',
      'The number of running requests.',
      labels,
      load.running,
    );
    metric(
      'sglang:num_queue_reqs',
      'gauge',
      'The number of requests in the waiting queue.',
      labels,
      load.waiting,
    );
    metric('sglang:token_usage', 'gauge', 'The token usage.', labels, load.kvCacheUsage);
    metric(
      'sglang:cache_hit_rate',
      'gauge',
      'The prefix cache hit rate.',
      labels,
      queriedTokens > 0 ? hitTokens / queriedTokens : 0,
    );
    histogram(
      'sglang:inter_token_latency_seconds',
      'Histogram of inter-token latency in seconds.',
      labels,
      itl,
    );
  } else {
    const labels = `engine="0",model_name="${model}"`;
    metric(
      'vllm:num_requests_running',
      'gauge',
      'Number of requests in model execution batches.',
      labels,
      load.running,
    );
    metric(
      'vllm:num_requests_waiting',
      'gauge',
      'Number of requests waiting to be processed.',
      labels,
      load.waiting,
    );
    metric(
      'vllm:kv_cache_usage_perc',
      'gauge',
      'KV-cache usage. 1 means 100 percent usage.',
      labels,
      load.kvCacheUsage,
    );
    metric(
      'vllm:prefix_cache_queries_total',
      'counter',
      'Prefix cache queries, in terms of number of queried tokens.',
      labels,
      queriedTokens,
    );
    metric(
      'vllm:prefix_cache_hits_total',
      'counter',
      'Prefix cache hits, in terms of number of cached tokens.',
      labels,
      hitTokens,
    );
    histogram(
      'vllm:inter_token_latency_seconds',
      'Histogram of inter-token latency in seconds.',
      labels,
      itl,
    );
    if (loraEnabled(sim)) {
      // vLLM's: no engine or model label, the adapters as comma-joined label values, the value
      // the time of the update (a scraper takes the series with the newest value).
      const labelValue = (names: readonly string[]) => names.join(',').replace(/["\\\n]/g, '_');
      lines.push(
        '# HELP vllm:lora_requests_info Running stats on lora requests.',
        '# TYPE vllm:lora_requests_info gauge',
        `vllm:lora_requests_info{max_lora="${o.maxLoras}",running_lora_adapters="${labelValue(load.runningAdapters)}",waiting_lora_adapters="${labelValue(load.waitingAdapters)}"} ${goFloat(Date.now() / 1000)}`,
      );
    }
  }
  if (loraEnabled(sim)) {
    // The simulator's own (sim:), for benchmarks: how often an adapter had to be loaded.
    metric(
      'sim:lora_adapter_loads_total',
      'counter',
      'LoRA adapters loaded because a request needed one that was not resident.',
      `model_name="${model}"`,
      counters.loraAdapterLoads,
    );
  }
  return lines.join('\n') + '\n';
}

/**
 * Python's float repr, as prometheus_client and json.dumps print values: `3.0` for whole numbers,
 * and an exponent of at least two digits below 1e-4 and from 1e16 on (`1e-05`), where JavaScript
 * writes `0.00001`.
 */
function pythonFloat(value: number): string {
  const magnitude = Math.abs(value);
  if (value !== 0 && (magnitude < 1e-4 || magnitude >= 1e16)) {
    return value
      .toExponential()
      .replace(/e([+-])(\d)$/, (_, sign: string, digit: string) => `e${sign}0${digit}`);
  }
  return Number.isInteger(value) ? value.toFixed(1) : String(value);
}

/** LoRA is on: adapters are configured, or may be loaded at run time. */
function loraEnabled(sim: Simulator): boolean {
  const o = sim.options();
  return o.loras !== undefined || o.allowRuntimeLoraUpdating || sim.adapters().size > 0;
}

/**
 * prometheus_client's float format (its `floatToGoString`): Python's repr, except that a number
 * with more than six digits before the point is written as Go would, `1.7e+09`.
 */
function goFloat(value: number): string {
  const text = pythonFloat(value);
  const dot = text.indexOf('.');
  if (value <= 0 || dot <= 6 || text.includes('e')) return text;
  const mantissa = `${text[0]}.${text.slice(1, dot)}${text.slice(dot + 1)}`.replace(/\.?0+$/, '');
  return `${mantissa}e+0${dot - 1}`;
}

/**
 * The ORCA header for a non-streaming answer, when the request asked for one and the engine is
 * vLLM; undefined otherwise.
 */
export function orcaHeaders(sim: Simulator, format: string | undefined): Record<string, string> {
  if (sim.options().engine !== 'vllm' || format === undefined) return {};
  const load = sim.engine.load();
  const waiting = pythonFloat(load.waiting);
  const usage = pythonFloat(load.kvCacheUsage);
  const kind = format.trim().toUpperCase();
  // vLLM's order and Python's json.dumps spacing, values as Python floats (test/engine/fixtures/orca-*.http).
  if (kind === 'TEXT') {
    return {
      'endpoint-load-metrics': `TEXT named_metrics.num_requests_waiting=${waiting}, named_metrics.kv_cache_usage_perc=${usage}`,
    };
  }
  if (kind === 'JSON') {
    return {
      'endpoint-load-metrics': `JSON {"named_metrics": {"num_requests_waiting": ${waiting}, "kv_cache_usage_perc": ${usage}}}`,
    };
  }
  return {};
}

export function metricsRoutes(sim: Simulator): Route[] {
  return [
    {
      kind: 'read',
      path: '/metrics',
      handle: ({ res }) => {
        const text = metricsText(sim);
        res.writeHead(200, {
          'content-type': 'text/plain; version=1.0.0; charset=utf-8',
          'content-length': String(Buffer.byteLength(text)),
        });
        res.end(text);
      },
    },
  ];
}
