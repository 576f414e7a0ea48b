/**
 * Reading the load a model server reports, in the two forms servers offer (the Gateway API
 * inference extension's model server protocol names the metrics; vLLM also answers ORCA):
 *
 * - the ORCA `endpoint-load-metrics` response header, sent when the request carries
 *   `endpoint-load-metrics-format: TEXT` (or `JSON`):
 *   `TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=3.0`
 *   or `JSON {"named_metrics": {"kv_cache_usage_perc": 0.4, ...}}`;
 * - the Prometheus text exposition of `GET /metrics`, under vLLM's, SGLang's or TensorRT-LLM's
 *   (Triton's) names, summed over label sets (one per engine of a data-parallel server).
 *
 * Pure: shared by the controller's scraper and the sidecar (ORCA headers, a standalone sidecar's
 * own scraper), which never import each other. Only three gauges and one histogram's sum and count
 * are wanted, so this scans lines for them rather than parsing the whole exposition (histograms
 * make up most of a vLLM scrape).
 */

export interface ModelServerLoad {
  /** Requests being generated. */
  running?: number | undefined;
  /** Requests queued. */
  waiting?: number | undefined;
  /** Fraction of the KV cache in use, 0..1. */
  kvCacheUsage?: number | undefined;
  /**
   * The server's inter-token latency histogram so far (`_sum` in seconds and `_count` in tokens),
   * cumulative since it started: how fast it generates is the change between two scrapes
   * (scrape-schedule.ts). Never in an ORCA header.
   */
  interTokenSeconds?: number | undefined;
  interTokens?: number | undefined;
}

/** Request header that asks a server for an ORCA load report, and the answer's header. */
export const ORCA_REQUEST_HEADER = 'endpoint-load-metrics-format';
export const ORCA_RESPONSE_HEADER = 'endpoint-load-metrics';

/** A report larger than this is not read (a broken or hostile server). */
export const MAX_REPORT_CHARS = 4 * 1024 * 1024;

type Field = keyof ModelServerLoad;

/** ORCA named metrics (vLLM maps its gauges to these) and the standard utilisation fields. */
const ORCA_FIELDS: Readonly<Record<string, Field>> = {
  num_requests_waiting: 'waiting',
  num_requests_running: 'running',
  kv_cache_usage_perc: 'kvCacheUsage',
  kv_cache_utilization: 'kvCacheUsage',
};

/** The ORCA header's value as load, or undefined when it carries none of the fields. */
export function parseOrcaHeader(value: string | undefined): ModelServerLoad | undefined {
  if (typeof value !== 'string' || value.length > MAX_REPORT_CHARS) return undefined;
  const trimmed = value.trim();
  const load: ModelServerLoad = {};
  if (/^JSON\s/i.test(trimmed)) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed.slice(4));
    } catch {
      return undefined;
    }
    if (!isRecord(parsed)) return undefined;
    const named = isRecord(parsed['named_metrics']) ? parsed['named_metrics'] : {};
    for (const [name, field] of Object.entries(ORCA_FIELDS)) {
      const v = named[name] ?? parsed[name];
      if (typeof v === 'number') set(load, field, v);
    }
  } else if (/^TEXT\s/i.test(trimmed)) {
    for (const pair of trimmed.slice(4).split(',')) {
      const eq = pair.indexOf('=');
      if (eq < 0) continue;
      const name = pair
        .slice(0, eq)
        .trim()
        .replace(/^named_metrics\./, '');
      const field = ORCA_FIELDS[name];
      if (field !== undefined) set(load, field, Number(pair.slice(eq + 1).trim()));
    }
  } else return undefined;
  return isEmpty(load) ? undefined : load;
}

/** A metric line that carries one of the fields: its name and, optionally, a label it needs. */
interface MetricRule {
  name: string;
  field: Field;
  /** `label=value` that must appear in the label set (TensorRT-LLM multiplexes one metric). */
  label?: string;
  /** Gauges of several engines: counts add up, fractions take the largest. */
  combine: 'sum' | 'max';
}

const METRIC_RULES: readonly MetricRule[] = [
  { name: 'vllm:num_requests_running', field: 'running', combine: 'sum' },
  { name: 'vllm:num_requests_waiting', field: 'waiting', combine: 'sum' },
  { name: 'vllm:kv_cache_usage_perc', field: 'kvCacheUsage', combine: 'max' },
  // vLLM before 0.10 called it this.
  { name: 'vllm:gpu_cache_usage_perc', field: 'kvCacheUsage', combine: 'max' },
  { name: 'sglang:num_running_reqs', field: 'running', combine: 'sum' },
  { name: 'sglang:num_queue_reqs', field: 'waiting', combine: 'sum' },
  { name: 'sglang:token_usage', field: 'kvCacheUsage', combine: 'max' },
  // The time between output tokens: how fast the server's hardware runs its batch (vLLM, SGLang).
  // vLLM before 0.11 names the same histogram `time_per_output_token_seconds`; a server with both
  // names doubles sum and count alike, which leaves their quotient, the mean, as it is.
  { name: 'vllm:inter_token_latency_seconds_sum', field: 'interTokenSeconds', combine: 'sum' },
  { name: 'vllm:inter_token_latency_seconds_count', field: 'interTokens', combine: 'sum' },
  { name: 'vllm:time_per_output_token_seconds_sum', field: 'interTokenSeconds', combine: 'sum' },
  { name: 'vllm:time_per_output_token_seconds_count', field: 'interTokens', combine: 'sum' },
  { name: 'sglang:inter_token_latency_seconds_sum', field: 'interTokenSeconds', combine: 'sum' },
  { name: 'sglang:inter_token_latency_seconds_count', field: 'interTokens', combine: 'sum' },
  {
    name: 'nv_trt_llm_request_metrics',
    label: 'request_type="scheduled"',
    field: 'running',
    combine: 'sum',
  },
  {
    name: 'nv_trt_llm_request_metrics',
    label: 'request_type="waiting"',
    field: 'waiting',
    combine: 'sum',
  },
  {
    name: 'nv_trt_llm_kv_cache_block_metrics',
    label: 'kv_cache_block_type="fraction"',
    field: 'kvCacheUsage',
    combine: 'max',
  },
];

/** The load gauges of a Prometheus text exposition, or undefined when it has none of them. */
export function parseLoadMetrics(text: string): ModelServerLoad | undefined {
  if (typeof text !== 'string' || text.length > MAX_REPORT_CHARS) return undefined;
  const load: ModelServerLoad = {};
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    const line = text.slice(start, end);
    start = end + 1;
    const first = line.charCodeAt(0);
    // Only lines of the wanted families: v(llm), s(glang), n(v_trt_llm); never comments.
    if (first !== 0x76 && first !== 0x73 && first !== 0x6e) continue;
    for (const rule of METRIC_RULES) {
      if (!line.startsWith(rule.name)) continue;
      const next = line.charCodeAt(rule.name.length);
      if (next !== 0x7b /* { */ && next !== 0x20 /* space */) continue;
      if (rule.label !== undefined && !line.includes(rule.label)) continue;
      const value = sampleValue(line, rule.name);
      if (value === undefined) continue;
      const previous = load[rule.field];
      const combined =
        previous === undefined
          ? value
          : rule.combine === 'sum'
            ? previous + value
            : Math.max(previous, value);
      set(load, rule.field, combined);
    }
  }
  return isEmpty(load) ? undefined : load;
}

/**
 * The value of a sample line of metric `name`: after the closing `}` of the labels (or the name),
 * before a timestamp. A label set that is never closed is no sample: read as one, the text after
 * its last space (`vllm:num_requests_waiting{model="x" 5`) passed for a value.
 */
function sampleValue(line: string, name: string): number | undefined {
  const labelled = line.charCodeAt(name.length) === 0x7b; /* { */
  const close = labelled ? line.lastIndexOf('}') : -1;
  if (labelled && close < 0) return undefined;
  const rest = (labelled ? line.slice(close + 1) : line.slice(name.length)).trim();
  const value = Number(rest.split(/\s+/)[0]);
  return Number.isFinite(value) ? value : undefined;
}

function set(load: ModelServerLoad, field: Field, value: number): void {
  if (!Number.isFinite(value) || value < 0) return;
  load[field] = field === 'kvCacheUsage' ? Math.min(1, value) : value;
}

function isEmpty(load: ModelServerLoad): boolean {
  return (
    load.running === undefined && load.waiting === undefined && load.kvCacheUsage === undefined
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
