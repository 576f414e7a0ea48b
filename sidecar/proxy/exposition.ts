/**
 * The per-endpoint metric families, kept and written as Prometheus text by the sidecar itself.
 *
 * Why not prom-client: with thousands of endpoints these families are megabytes of text, and
 * prom-client writes one family in one synchronous call, so every stream on the proxy's loop
 * stalled for as long at each scrape (issue 16; measured in docs/benchmarks.md, "Admin scrapes at
 * the largest pool"). Here a family is read line by line, so `familiesText` cuts the text into
 * slices and the admin server yields to the loop between them.
 *
 * The text is byte for byte what prom-client 15 wrote for the same series, and exposition.test.ts
 * checks it against prom-client itself: a counter or histogram series exists from its first
 * increment or observation and is written in that order; a removed series counted again starts
 * anew, at the end; labels are escaped alike and values written alike (NaN as `Nan`, as
 * prom-client does).
 */

export type FamilyType = 'counter' | 'gauge' | 'histogram';

/** One metric family: its header, then its series, read as they are iterated. */
export interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: FamilyType;
  /** Sample lines per series: 1, or a histogram's buckets, +Inf, sum and count. */
  readonly linesPerSeries: number;
  /** One string per series: its sample lines joined by newlines, without a last newline. */
  series(): Iterable<string>;
}

/**
 * Lines per slice of `familiesText`: under a millisecond of work on the 2-core machine the
 * benchmark runs on (`npm run bench:admin-scrape`), so a stream waits at most about that long.
 */
export const LINES_PER_SLICE = 1_024;

const NEEDS_ESCAPE = /[\\\n"]/;

function escapeText(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

/** A label value escaped as prom-client escapes it (backslash, newline, double quote). */
export function labelValue(value: string): string {
  return NEEDS_ESCAPE.test(value) ? escapeText(value).replace(/"/g, '\\"') : value;
}

/** A label set as it stands between the braces: `pool="a",backend="b"`, in the given order. */
export function labelText(labels: Readonly<Record<string, string>>): string {
  return Object.entries(labels)
    .map(([name, value]) => `${name}="${labelValue(value)}"`)
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
  readonly linesPerSeries = 1;
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

  *series(): Generator<string> {
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
  readonly linesPerSeries: number;
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
    this.linesPerSeries = bounds.length + 3;
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

  *series(): Generator<string> {
    const name = this.name;
    for (const [labels, series] of this.#series) {
      let text = '';
      let cumulative = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += series.counts[i]!;
        text += `${this.#bucketPrefixes[i]!}${labels}} ${cumulative}\n`;
      }
      text += `${name}_bucket{le="+Inf",${labels}} ${series.count}\n`;
      text += `${name}_sum{${labels}} ${valueText(series.sum)}\n`;
      yield `${text}${name}_count{${labels}} ${series.count}`;
    }
  }
}

/**
 * A gauge whose series are read from `rows` when the family is written: `labels` gets each row's
 * index too, so gauges that read the same rows can share the label text.
 */
export function gaugeFamily<T>(
  name: string,
  help: string,
  rows: () => readonly T[],
  labels: (row: T, index: number) => string,
  value: (row: T) => number,
): Family {
  return {
    name,
    help,
    type: 'gauge',
    linesPerSeries: 1,
    *series() {
      const all = rows();
      for (let i = 0; i < all.length; i++)
        yield `${name}{${labels(all[i]!, i)}} ${valueText(value(all[i]!))}`;
    },
  };
}

/**
 * The families as prom-client's `Registry.metrics()` writes them (HELP and TYPE lines, the
 * samples, a blank line between families, a newline at the end), cut into pieces: a piece ends
 * after the series that brings it to `linesPerSlice` lines. Joined, the pieces are the text.
 * Each piece is computed when it is asked for: the caller decides when the next one runs.
 */
export function* familiesText(
  families: Iterable<Family>,
  linesPerSlice = LINES_PER_SLICE,
): Generator<string> {
  let text = '';
  let lines = 0;
  let first = true;
  for (const family of families) {
    const name = escapeText(family.name);
    // A blank line before every family but the first.
    text += `${first ? '' : '\n'}# HELP ${name} ${escapeText(family.help)}\n# TYPE ${name} ${family.type}\n`;
    lines += first ? 2 : 3;
    first = false;
    for (const series of family.series()) {
      text += `${series}\n`;
      lines += family.linesPerSeries;
      if (lines >= linesPerSlice) {
        yield text;
        text = '';
        lines = 0;
      }
    }
  }
  if (text !== '') yield text;
}
