/**
 * The per-endpoint metric families, kept and written as Prometheus text by the sidecar itself.
 *
 * Why not prom-client: at 4,096 endpoints these families are ~120,000 lines (8.5 MB), and
 * prom-client writes one family in one synchronous call (the TTFT histogram alone took 200 ms or
 * more): every stream on the proxy's loop stalled for that long at each scrape (issue 16). Here a
 * family is read line by line, so `familiesText` cuts the text into slices and the admin server
 * yields to the loop between them.
 *
 * The text is byte for byte what prom-client 15 wrote for the same series, and exposition.test.ts
 * checks it against prom-client itself: a counter or histogram series exists from its first
 * increment or observation and is written in that order; a removed series counted again starts
 * anew, at the end; labels are escaped alike and values written alike (NaN as `Nan`, as
 * prom-client does).
 */

export type FamilyType = 'counter' | 'gauge' | 'histogram';

/** One metric family: its header, then its samples, read as they are iterated. */
export interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: FamilyType;
  /** One string per sample line, without the newline. */
  lines(): Iterable<string>;
}

/**
 * Lines per slice of `familiesText`: about a millisecond of work on the 2-core machine the
 * benchmark runs on (`npm run bench:admin-scrape`), so a stream waits at most about that long.
 */
export const LINES_PER_SLICE = 1_024;

const NEEDS_ESCAPE = /[\\\n"]/;

function escapeText(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function escapeLabelValue(value: string): string {
  return NEEDS_ESCAPE.test(value) ? escapeText(value).replace(/"/g, '\\"') : value;
}

/** A label set as it stands between the braces: `pool="a",backend="b"`, in the given order. */
export function labelText(labels: Readonly<Record<string, string>>): string {
  return Object.entries(labels)
    .map(([name, value]) => `${name}="${escapeLabelValue(value)}"`)
    .join(',');
}

/** A sample value as prom-client writes it. */
export function valueText(value: number): string {
  if (Number.isNaN(value)) return 'Nan';
  if (!Number.isFinite(value)) return value < 0 ? '-Inf' : '+Inf';
  return `${value}`;
}

/** A counter with labels; a series exists from its first increment. */
export class CounterFamily implements Family {
  readonly type = 'counter';
  readonly name: string;
  readonly help: string;
  /** By label text, in the order the series were first counted. */
  readonly #series = new Map<string, { value: number }>();

  constructor(name: string, help: string) {
    this.name = name;
    this.help = help;
  }

  /** The series of one label set (`labelText`), to count on the request path without lookups by label. */
  child(labels: string): { inc(): void } {
    return {
      inc: () => {
        const series = this.#series.get(labels);
        if (series === undefined) this.#series.set(labels, { value: 1 });
        else series.value += 1;
      },
    };
  }

  remove(labels: string): void {
    this.#series.delete(labels);
  }

  *lines(): Generator<string> {
    for (const [labels, series] of this.#series)
      yield `${this.name}{${labels}} ${valueText(series.value)}`;
  }
}

interface HistogramSeries {
  /** Observations per bucket (not cumulative), in the order of the bounds. */
  readonly counts: number[];
  sum: number;
  count: number;
}

/** A histogram with labels; a series exists from its first observation. */
export class HistogramFamily implements Family {
  readonly type = 'histogram';
  readonly name: string;
  readonly help: string;
  readonly #bounds: readonly number[];
  /** `name_bucket{le="bound",` per bound: the `le` label comes first, as prom-client writes it. */
  readonly #bucketPrefixes: readonly string[];
  readonly #series = new Map<string, HistogramSeries>();

  constructor(name: string, help: string, bounds: readonly number[]) {
    this.name = name;
    this.help = help;
    this.#bounds = bounds;
    this.#bucketPrefixes = bounds.map((b) => `${name}_bucket{le="${b}",`);
  }

  child(labels: string): { observe(value: number): void } {
    return { observe: (value) => this.#observe(labels, value) };
  }

  remove(labels: string): void {
    this.#series.delete(labels);
  }

  #observe(labels: string, value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    let series = this.#series.get(labels);
    if (series === undefined) {
      series = { counts: this.#bounds.map(() => 0), sum: 0, count: 0 };
      this.#series.set(labels, series);
    }
    series.sum += value;
    series.count += 1;
    // Above the last bound: counted in +Inf (the count) only.
    const bucket = this.#bounds.findIndex((bound) => value <= bound);
    if (bucket >= 0) series.counts[bucket]! += 1;
  }

  *lines(): Generator<string> {
    const name = this.name;
    for (const [labels, series] of this.#series) {
      // One series' lines are read together, so its buckets, +Inf and count always agree.
      const lines: string[] = [];
      let cumulative = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += series.counts[i]!;
        lines.push(`${this.#bucketPrefixes[i]!}${labels}} ${cumulative}`);
      }
      lines.push(`${name}_bucket{le="+Inf",${labels}} ${series.count}`);
      lines.push(`${name}_sum{${labels}} ${valueText(series.sum)}`);
      lines.push(`${name}_count{${labels}} ${series.count}`);
      yield* lines;
    }
  }
}

/** A gauge whose series are read from `rows` when the family is written. */
export function gaugeFamily<T>(
  name: string,
  help: string,
  rows: () => Iterable<T>,
  sample: (row: T) => { labels: string; value: number },
): Family {
  return {
    name,
    help,
    type: 'gauge',
    *lines() {
      for (const row of rows()) {
        const { labels, value } = sample(row);
        yield `${name}{${labels}} ${valueText(value)}`;
      }
    },
  };
}

/** The text's lines: per family HELP, TYPE and the samples, a blank line between families. */
function* textLines(families: Iterable<Family>): Generator<string> {
  let first = true;
  for (const family of families) {
    if (!first) yield '';
    first = false;
    const name = escapeText(family.name);
    yield `# HELP ${name} ${escapeText(family.help)}`;
    yield `# TYPE ${name} ${family.type}`;
    yield* family.lines();
  }
}

/**
 * The families as prom-client's `Registry.metrics()` writes them (HELP and TYPE lines, the
 * samples, a blank line between families, a newline at the end), cut into pieces of
 * `linesPerSlice` lines. Joined, the pieces are the text. Each piece is computed when it is asked
 * for: the caller decides when the next one runs.
 */
export function* familiesText(
  families: Iterable<Family>,
  linesPerSlice = LINES_PER_SLICE,
): Generator<string> {
  let lines: string[] = [];
  for (const line of textLines(families)) {
    lines.push(line);
    if (lines.length >= linesPerSlice) {
      yield `${lines.join('\n')}\n`;
      lines = [];
    }
  }
  if (lines.length > 0) yield `${lines.join('\n')}\n`;
}
