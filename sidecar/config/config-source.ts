import type { ControllerClientOptions } from './controller/controller-client.ts';

/** The controller client's options that the command line gives. */
export type ControllerSourceOptions = Omit<
  ControllerClientOptions,
  'logger' | 'onSnapshot' | 'currentEndpoints'
>;

/** Where the pool configuration comes from. */
export type ConfigSource =
  | { kind: 'file'; poolFile: string; loadScrapeEveryMs?: number | undefined }
  | ({ kind: 'controller' } & ControllerSourceOptions);

/** A configuration source once started: it writes into the `ActivePoolState` until closed. */
export interface RunningConfigSource {
  /** Re-reads the configuration now, where that means something (a pool file); false otherwise. */
  reload(): Promise<boolean>;
  /** Stops every watcher, prober, stream and timer of the source. */
  close(): Promise<void>;
}
