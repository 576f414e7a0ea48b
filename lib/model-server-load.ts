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
 * Beside the load, the exposition says which LoRA adapters the server has in use: vLLM's
 * `vllm:lora_requests_info` (see `LORA_INFO_METRIC`).
 *
 * Pure: shared by the controller's scraper and the sidecar (ORCA headers, a standalone sidecar's
 * own scraper), which never import each other. Only three gauges, one histogram's sum and count
 * and the adapters' info gauge are wanted, so this scans lines for them rather than parsing the
 * whole exposition (histograms make up most of a vLLM scrape).
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
  /**
   * LoRA adapters the server has requests of running or waiting for (vLLM's
   * `vllm:lora_requests_info`, its newest series): resident there, or about to be. Undefined: the
   * page has no such metric (a server without LoRA, or not vLLM); empty: no adapter in use.
   */
  loadedAdapters?: readonly string[] | undefined;
}

/** Request header that asks a server for an ORCA load report, and the answer's header. */
export const ORCA_REQUEST_HEADER = 'endpoint-load-metrics-format';
export const ORCA_RESPONSE_HEADER = 'endpoint-load-metrics';

/** A report larger than this is not read (a broken or hostile server). */
export const MAX_REPORT_CHARS = 4 * 1024 * 1024;

type Field = Exclude<keyof ModelServerLoad, 'loadedAdapters'>;

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

/**
 * The longest line of a wanted series that is read (bytes); a longer one is skipped. vLLM's are
 * under 200 bytes; a label set of kilobytes is no engine's.
 */
export const MAX_SAMPLE_LINE_BYTES = 4096;

/**
 * The most lines of wanted series one page may hold. A data-parallel vLLM has one label set per
 * engine, a few dozen lines in all; a page with more is not a load report (a hostile server's
 * millions of `vllm:num_requests_running{...}` lines would each be decoded and parsed).
 */
export const MAX_LOAD_SAMPLES = 1024;

const RULE_NAMES = METRIC_RULES.map((rule) => Buffer.from(rule.name, 'latin1'));

/**
 * vLLM's info gauge of LoRA use: one series per combination of labels it has reported,
 * `running_lora_adapters` and `waiting_lora_adapters` (adapter names joined by commas) and
 * `max_lora`, each set to the time it was last reported. A series is never removed, so the page
 * holds every combination seen since the server started; the current one is the series with the
 * largest value (the newest time).
 */
export const LORA_INFO_METRIC = 'vllm:lora_requests_info';
const LORA_INFO_NAME = Buffer.from(LORA_INFO_METRIC, 'latin1');

/**
 * The most `vllm:lora_requests_info` lines one page is read for. They do not count towards
 * `MAX_LOAD_SAMPLES`: a long-running server with many adapters legitimately piles up one series
 * per combination it has had in use. Past this many the page's adapters are not known (which is
 * current cannot be told without reading them all), but its load still is.
 */
export const MAX_LORA_SERIES = 4096;

/** Bytes a wanted line can start with: v(llm), s(glang), n(v_trt_llm); never comments. */
const isWantedFirstByte = (b: number | undefined): boolean =>
  b === 0x76 || b === 0x73 || b === 0x6e;

/**
 * Reads a Prometheus text exposition chunk by chunk as it arrives, for the load gauges only
 * (issue 40: a valid 4 MiB page on every scrape made the proxy 16× slower). Each chunk is searched
 * for its line ends natively; a line whose first byte cannot start a wanted name is skipped
 * without a string ever being made of it, and a line that can is compared byte by byte with the
 * wanted names, so that only the few lines of wanted series are decoded. Nothing of the page is
 * kept but a partial wanted line between chunks (at most `MAX_SAMPLE_LINE_BYTES`): the page is
 * never concatenated or decoded whole. `push` returns false once the page is refused (over
 * `MAX_REPORT_CHARS` bytes, or over `MAX_LOAD_SAMPLES` wanted lines): stop reading it then.
 */
export class LoadMetricsParser {
  readonly #load: ModelServerLoad = {};
  #bytes = 0;
  #samples = 0;
  /** The start of a wanted line the last chunk ended in. */
  #carry: Buffer | undefined;
  /** Inside a line not worth reading (unwanted, or too long): discard up to its end. */
  #skipping = false;
  #refused: string | undefined;
  /** The newest `vllm:lora_requests_info` series so far: its time, and its adapters. */
  #lora: { at: number; adapters: Set<string> } | undefined;
  #loraLines = 0;

  /** Bytes of the page read so far. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Why the page was refused; undefined while it is being read. */
  get refused(): string | undefined {
    return this.#refused;
  }

  push(chunk: Buffer): boolean {
    if (this.#refused !== undefined) return false;
    this.#bytes += chunk.length;
    if (this.#bytes > MAX_REPORT_CHARS)
      return this.#refuse(`larger than ${MAX_REPORT_CHARS} bytes`);
    let pos = 0;
    if (this.#skipping || this.#carry !== undefined) {
      const nl = chunk.indexOf(0x0a);
      if (nl < 0) {
        if (this.#carry !== undefined) this.#extendCarry(chunk);
        return true;
      }
      if (this.#carry !== undefined) {
        const line = Buffer.concat([this.#carry, chunk.subarray(0, nl)]);
        this.#carry = undefined;
        if (line.length <= MAX_SAMPLE_LINE_BYTES) this.#line(line, 0, line.length);
      }
      this.#skipping = false;
      pos = nl + 1;
    }
    while (pos < chunk.length && this.#refused === undefined) {
      const nl = chunk.indexOf(0x0a, pos);
      const wanted = isWantedFirstByte(chunk[pos]);
      if (nl < 0) {
        if (wanted) {
          this.#carry = Buffer.alloc(0);
          this.#extendCarry(chunk.subarray(pos));
        } else this.#skipping = true;
        break;
      }
      if (wanted && nl - pos <= MAX_SAMPLE_LINE_BYTES) this.#line(chunk, pos, nl);
      pos = nl + 1;
    }
    return this.#refused === undefined;
  }

  /** The load of the page read so far (a last line without a newline included). */
  end(): ModelServerLoad | undefined {
    const carry = this.#carry;
    this.#carry = undefined;
    if (this.#refused !== undefined) return undefined;
    if (carry !== undefined) this.#line(carry, 0, carry.length);
    if (this.#refused !== undefined || isEmpty(this.#load)) return undefined;
    const lora = this.#loraLines <= MAX_LORA_SERIES ? this.#lora : undefined;
    return lora === undefined
      ? { ...this.#load }
      : { ...this.#load, loadedAdapters: [...lora.adapters] };
  }

  #extendCarry(piece: Buffer): void {
    const carry = this.#carry as Buffer;
    if (carry.length + piece.length > MAX_SAMPLE_LINE_BYTES) {
      this.#carry = undefined;
      this.#skipping = true;
    } else this.#carry = Buffer.concat([carry, piece]);
  }

  #refuse(reason: string): false {
    this.#refused = reason;
    this.#carry = undefined;
    return false;
  }

  /** The line `buf[start, end)`, whose first byte may start a wanted name. */
  #line(buf: Buffer, start: number, end: number): void {
    if (isNamed(buf, start, end, LORA_INFO_NAME)) {
      // Counted apart from the load samples, and not read past the cap.
      if (++this.#loraLines <= MAX_LORA_SERIES) this.#loraLine(buf.toString('utf8', start, end));
      return;
    }
    let line: string | undefined;
    for (let i = 0; i < METRIC_RULES.length; i++) {
      const rule = METRIC_RULES[i] as MetricRule;
      const name = RULE_NAMES[i] as Buffer;
      if (!isNamed(buf, start, end, name)) continue;
      if (line === undefined) {
        if (++this.#samples > MAX_LOAD_SAMPLES) {
          this.#refuse(`more than ${MAX_LOAD_SAMPLES} load samples`);
          return;
        }
        line = buf.toString('utf8', start, end);
      }
      if (rule.label !== undefined && !line.includes(rule.label)) continue;
      const value = sampleValue(line, rule.name);
      if (value === undefined) continue;
      const previous = this.#load[rule.field];
      const combined =
        previous === undefined
          ? value
          : rule.combine === 'sum'
            ? previous + value
            : Math.max(previous, value);
      set(this.#load, rule.field, combined);
    }
  }

  /** A `vllm:lora_requests_info` sample: kept when it is the newest so far (ties merge). */
  #loraLine(line: string): void {
    const sample = labelledSample(line, LORA_INFO_METRIC.length);
    if (sample === undefined) return;
    const { labels, value } = sample;
    const current = this.#lora;
    if (current !== undefined && value < current.at) return;
    const adapters =
      current !== undefined && value === current.at ? current.adapters : new Set<string>();
    for (const label of ['running_lora_adapters', 'waiting_lora_adapters'])
      for (const name of (labels.get(label) ?? '').split(',')) {
        const trimmed = name.trim();
        if (trimmed !== '') adapters.add(trimmed);
      }
    this.#lora = { at: value, adapters };
  }
}

/** Whether `buf[start, end)` is a sample line of metric `name` (the name, then `{` or a space). */
function isNamed(buf: Buffer, start: number, end: number, name: Buffer): boolean {
  const after = start + name.length;
  if (after >= end) return false;
  const next = buf[after];
  if (next !== 0x7b /* { */ && next !== 0x20 /* space */) return false;
  return buf.compare(name, 0, name.length, start, after) === 0;
}

/**
 * The labels and value of a sample line whose name is `nameLength` characters long, read as the
 * exposition format writes them: `name{a="x",b="y\"z"} value [timestamp]`, label values with `\\`,
 * `\"` and `\n` escaped. Undefined for a line that is not one (an unclosed label set, a value
 * that is not a finite number).
 */
function labelledSample(
  line: string,
  nameLength: number,
): { labels: Map<string, string>; value: number } | undefined {
  const labels = new Map<string, string>();
  let i = nameLength;
  if (line[i] === '{') {
    i++;
    for (;;) {
      while (line[i] === ' ' || line[i] === ',') i++;
      if (line[i] === '}') break;
      const eq = line.indexOf('=', i);
      if (eq < 0 || line[eq + 1] !== '"') return undefined;
      const key = line.slice(i, eq).trim();
      let value = '';
      let j = eq + 2;
      for (; j < line.length && line[j] !== '"'; j++) {
        if (line[j] !== '\\') {
          value += line[j];
          continue;
        }
        j++;
        value += line[j] === 'n' ? '\n' : (line[j] ?? '');
      }
      if (j >= line.length) return undefined;
      labels.set(key, value);
      i = j + 1;
    }
    i++;
  }
  const rest = line.slice(i).trim();
  const value = Number(rest.split(/\s+/)[0]);
  return rest !== '' && Number.isFinite(value) ? { labels, value } : undefined;
}

/** The load gauges of a Prometheus text exposition, or undefined when it has none of them. */
export function parseLoadMetrics(text: string): ModelServerLoad | undefined {
  if (typeof text !== 'string' || text.length > MAX_REPORT_CHARS) return undefined;
  const parser = new LoadMetricsParser();
  parser.push(Buffer.from(text, 'utf8'));
  return parser.end();
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
