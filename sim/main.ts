/**
 * Process entry of `switchyard sim`: start one simulator, print its URL as the only line on
 * stdout (the demo and the tests read it), log to stderr, close on SIGTERM / SIGINT.
 * The CLI (cli/) parses flags into `Partial<SimOptions>` and calls `runSimFromOptions`.
 */
import { pino } from 'pino';
import type { Level } from 'pino';
import type { SimOptions } from './options.ts';
import { startSim } from './server.ts';
import type { SimHandle } from './server.ts';

export interface RunSimIo {
  /** pino level for the stderr log; default `warn`. */
  logLevel?: Level | 'silent' | undefined;
  /** Where the URL line goes; default process.stdout. */
  stdout?: NodeJS.WritableStream | undefined;
  /** Install SIGTERM/SIGINT handlers that close the server; default true. */
  handleSignals?: boolean | undefined;
}

export interface RunningSim extends SimHandle {
  /** Settles when the server has closed (after a signal or `close()`). */
  readonly closed: Promise<void>;
}

export async function runSimFromOptions(
  options: Partial<SimOptions>,
  io: RunSimIo = {},
): Promise<RunningSim> {
  const logger = pino(
    { name: 'switchyard-sim', level: io.logLevel ?? 'warn' },
    pino.destination({ fd: 2, sync: true }),
  );
  const sim = await startSim(options, { logger });
  const out = io.stdout ?? process.stdout;
  out.write(`${sim.url}\n`);

  let resolveClosed!: () => void;
  const closed = new Promise<void>((resolve) => {
    resolveClosed = resolve;
  });
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      await sim.close();
      resolveClosed();
    })();
    return closing;
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    logger.info({ signal }, 'closing');
    close().then(
      () => {
        // Nothing of ours is left; if something else still holds the loop, do not hang a
        // supervisor that asked us to stop.
        setTimeout(() => process.exit(0), 2000).unref();
      },
      (err: unknown) => {
        logger.warn({ err }, 'close failed');
        process.exit(1);
      },
    );
  };
  if (io.handleSignals ?? true) {
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  }
  return { ...sim, close, closed };
}
