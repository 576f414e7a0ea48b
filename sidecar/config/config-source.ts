import type { ControllerClientOptions } from './controller/controller-client.ts';

/** The controller client's options that the command line gives. */
export type ControllerSourceOptions = Omit<
  ControllerClientOptions,
  'logger' | 'onSnapshot' | 'currentEndpoints' | 'placements'
>;

/**
 * Where the pool configurations come from. Either names one pool or several, in order (the first
 * is the default pool: docs/sidecar.md, "Several pools"): pool files (a directory stands for its
 * `*.yaml`, `*.yml` and `*.json` files, sorted by name), or pools the controller streams (one
 * stream each; with several, each keeps its cache file beside `cacheFile`: `snapshot.json` →
 * `snapshot.<pool>.json`).
 */
export type ConfigSource =
  | { kind: 'file'; poolFile: string | readonly string[]; loadScrapeEveryMs?: number | undefined }
  | ({ kind: 'controller' } & Omit<ControllerSourceOptions, 'pool'> & {
        pool: string | readonly string[];
      });

/** A configuration source once started: it writes into the `ActivePoolState` until closed. */
export interface RunningConfigSource {
  /** Re-reads the configuration now, where that means something (a pool file); false otherwise. */
  reload(): Promise<boolean>;
  /** Stops every watcher, prober, stream and timer of the source. */
  close(): Promise<void>;
}
