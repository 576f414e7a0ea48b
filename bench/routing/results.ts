/**
 * The shape of a routing benchmark run: its settings, one record per policy and scenario, and
 * the results.json that run.ts writes and plots.ts and report.ts read (here, apart from all
 * three, so that they do not import each other in a circle).
 */
import type { LoadSource } from '../../lib/bench-names.ts';
import type { SharePoint } from './metrics.ts';
import type { ScenarioName } from './scenarios.ts';
import type { SeededResult } from './seeds.ts';
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
  /** The first seed; run k uses seed + k. */
  seed: number;
  /** Runs per policy and scenario, each with its own seed. */
  seeds: number;
  /**
   * How trace prompts are sent: `chat` rebuilds conversations from hash-id chains (a later turn
   * is a messages array repeating the earlier ones), `single` sends each prompt as one message.
   * A trace without hash ids is always sent `single`.
   */
  prompts: 'chat' | 'single';
  out: string;
  heterogeneous: boolean;
  /** Draw plots (PNG and SVG); off in the smoke test. */
  plots: boolean;
  /** Progress on stderr. */
  quiet: boolean;
  /**
   * Also write every request's outcome, one file a run (`requests/<scenario>/<policy>-seed<n>.json`
   * under `out`): when it was sent and ended, its TTFT, the backend that answered and, for trace
   * runs, its prompt's size and conversation turn. For finding which requests make a tail.
   */
  dumpRequests?: boolean;
  /**
   * Who scrapes the servers' load for switchyard's sidecars (lib/bench-names.ts, LOAD_SOURCES);
   * absent in the results of runs from before the option, which were all `sidecar`.
   */
  loadSource?: LoadSource;
}

/**
 * One policy's figures in one scenario: each the median over the seeds, every seed's own beside
 * them (seeds.ts); machineCpuPercent is how busy the whole machine was during the replay.
 */
export type ScenarioResult = SeededResult & { costWeightPerMs?: number | null };

export interface RunRecord extends ScenarioResult {
  policy: string;
  family: string;
  /** Sorted successful TTFTs of every seed, thinned, for CDF plots. */
  ttftCdf: { x: number; p: number }[];
  /** Each backend's share of the requests over the first seed's run, for the herding plot. */
  shareOverTime: SharePoint[];
}

export interface BenchResults {
  settings: BenchSettings & { model: string; charsPerToken: number; blockTokens: number };
  trace: {
    file: string;
    format: Trace['format'];
    requestsInFile: number;
    requestsReplayed: number;
    /** Replayed requests that continue an earlier one (chat-shaped replay only). */
    laterTurns: number | null;
    idealHitRate: number | null;
    idealHitRateWholeTrace: number | null;
    traceSpanS: number;
    replaySpanS: number;
  };
  machine: { cpus: number; node: string };
  versions: Record<string, string>;
  skipped: Record<string, string>;
  policiesDescribed: Record<string, string>;
  scenarios: Record<string, Record<string, ScenarioResult>>;
  /**
   * Each scenario's replay rate: wall ms per trace ms, and the share of the servers' slot time
   * its requests' nominal demand keeps busy (scenarios.ts `offeredUtilisation`). Absent in runs
   * before the moderate scenario.
   */
  scenarioRates?: Record<string, { timeScale: number; offeredUtilisation: number }>;
  scenarioDescriptions: Record<string, string>;
  targets: { checks: TargetCheck[] };
  durationS: number;
  /** The machine's 1-, 5- and 15-minute load averages as the run began and ended (absent before issue 45). */
  loadAverage?: { start: number[]; end: number[] };
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
