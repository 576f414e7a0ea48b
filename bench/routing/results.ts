/**
 * The shape of a routing benchmark run: its settings, one record per policy and scenario, and
 * the results.json that run.ts writes and plots.ts and report.ts read (here, apart from all
 * three, so that they do not import each other in a circle).
 */
import type { PolicyResult } from './metrics.ts';
import type { ScenarioName } from './scenarios.ts';
import type { Trace } from './trace.ts';

export interface BenchSettings {
  trace: string;
  backends: number;
  routers: number;
  policies: string[];
  scenarios: ScenarioName[];
  /** Wall ms per trace ms. */
  timeScale: number;
  /** Simulator speed (simulated ms per wall ms). */
  speed: number;
  /** 0: the whole trace. */
  maxRequests: number;
  seed: number;
  out: string;
  heterogeneous: boolean;
  /** Draw plots (PNG and SVG); off in the smoke test. */
  plots: boolean;
  /** Progress on stderr. */
  quiet: boolean;
}

export interface RunRecord extends PolicyResult {
  policy: string;
  /** How busy the whole machine was during the replay (all cores, every process), percent. */
  machineCpuPercent: number | null;
  family: string;
  costWeightPerMs?: number | null;
  /** Sorted successful TTFTs, thinned, for CDF plots. */
  ttftCdf: { x: number; p: number }[];
}

export interface BenchResults {
  settings: BenchSettings & { model: string; charsPerToken: number; blockTokens: number };
  trace: {
    file: string;
    format: Trace['format'];
    requestsInFile: number;
    requestsReplayed: number;
    idealHitRate: number | null;
    idealHitRateWholeTrace: number | null;
    traceSpanS: number;
    replaySpanS: number;
  };
  machine: { cpus: number; node: string };
  versions: Record<string, string>;
  skipped: Record<string, string>;
  policiesDescribed: Record<string, string>;
  scenarios: Record<
    string,
    Record<
      string,
      PolicyResult & { costWeightPerMs?: number | null; machineCpuPercent?: number | null }
    >
  >;
  scenarioDescriptions: Record<string, string>;
  targets: { checks: TargetCheck[] };
  durationS: number;
}

export interface TargetCheck {
  scenario: string;
  target: string;
  /** switchyard's figure. */
  measured: number | null;
  /** What it had to be at most (or at least, for the hit rate). */
  limit: number | null;
  met: boolean | null;
}
