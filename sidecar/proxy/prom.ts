/**
 * The parts of prom-client the sidecar uses, loaded file by file instead of through its index.
 *
 * Why: prom-client's index loads everything it has (the Pushgateway, Summary with its t-digest,
 * the cluster AggregatorRegistry and node:cluster), and its process-CPU default metric loads
 * `@opentelemetry/api` for exemplars the sidecar never records: together several MB of the RSS of
 * every app pod's sidecar (docs/image.md#memory). The files are CommonJS with no `exports` map,
 * pinned by package.json (15.1.3); sidecar/proxy/prom.test.ts checks that the default metrics are
 * the ones `collectDefaultMetrics` registers, so a prom-client upgrade that adds or renames one
 * fails there.
 */
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';

const require = createRequire(import.meta.url);

export const Registry = require('prom-client/lib/registry.js') as typeof PromClient.Registry;
export const Counter = require('prom-client/lib/counter.js') as typeof PromClient.Counter;
export const Gauge = require('prom-client/lib/gauge.js') as typeof PromClient.Gauge;
export const Histogram = require('prom-client/lib/histogram.js') as typeof PromClient.Histogram;
export type Counter<T extends string = string> = PromClient.Counter<T>;
export type Gauge<T extends string = string> = PromClient.Gauge<T>;
export type Histogram<T extends string = string> = PromClient.Histogram<T>;
export type Registry = PromClient.Registry;

/** prom-client's default metrics but its process-CPU one (`processCpuCounters` stands in). */
const DEFAULT_METRICS = [
  'processStartTime',
  'osMemoryHeap',
  'processOpenFileDescriptors',
  'processMaxFileDescriptors',
  'eventLoopLag',
  'processResources',
  'processHandles',
  'processRequests',
  'heapSizeAndUsed',
  'heapSpacesSizeAndUsed',
  'version',
  'gc',
] as const;

type DefaultMetric = (registry: Registry, config: { prefix: string }) => void;

/**
 * What `collectDefaultMetrics({ register, prefix })` registers, without loading
 * `@opentelemetry/api`: the same metrics, names and help texts.
 */
export function collectDefaultMetrics(options: { register: Registry; prefix: string }): void {
  const config = { prefix: options.prefix, eventLoopMonitoringPrecision: 10 };
  processCpuCounters(options.register, options.prefix);
  for (const name of DEFAULT_METRICS) {
    (require(`prom-client/lib/metrics/${name}.js`) as DefaultMetric)(options.register, config);
  }
}

/** prom-client's processCpuTotal without exemplars (and so without OpenTelemetry). */
function processCpuCounters(registry: Registry, prefix: string): void {
  let last = process.cpuUsage();
  const registers = [registry];
  const user = new Counter({
    name: `${prefix}process_cpu_user_seconds_total`,
    help: 'Total user CPU time spent in seconds.',
    registers,
    // One metric's `collect` sets all three, as in prom-client.
    collect() {
      const now = process.cpuUsage();
      const userMicros = now.user - last.user;
      const systemMicros = now.system - last.system;
      last = now;
      user.inc(userMicros / 1e6);
      system.inc(systemMicros / 1e6);
      total.inc((userMicros + systemMicros) / 1e6);
    },
  });
  const system = new Counter({
    name: `${prefix}process_cpu_system_seconds_total`,
    help: 'Total system CPU time spent in seconds.',
    registers,
  });
  const total = new Counter({
    name: `${prefix}process_cpu_seconds_total`,
    help: 'Total user and system CPU time spent in seconds.',
    registers,
  });
}
