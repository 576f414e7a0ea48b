/**
 * The controller's stream without Kubernetes, for the switchyard routers of `switchyard bench`
 * (with `--load-source controller`, the default): `switchyard relay` (relay/relay.ts) serving the
 * bench's pool file in namespace `bench`. The sidecars subscribe with `--controller` as in
 * Kubernetes, so one scraper serves all of them (R sidecars cost the servers one scrape a period,
 * not R) and, unless the rate is 0, each sidecar learns where the others sent which prompts (the
 * fleet-wide view, docs/fleet-view.md), over the same code path as in a cluster.
 *
 *   node bench/routing/load-relay.ts <pool file> <scrape period ms> [placement bytes/s, default 8192]
 *
 * Prints its URL when it listens; stops on SIGTERM. Any bearer token is accepted (the benchmark's
 * processes run on loopback).
 */
import { pino } from 'pino';
import { RelayConfigError, startRelay } from '../../relay/relay.ts';

const [poolFile, periodArg, placementArg] = process.argv.slice(2);
const periodMs = Number(periodArg);
const placementBytesPerSecond = Number(placementArg ?? 8192);
if (
  poolFile === undefined ||
  !(periodMs > 0) ||
  !Number.isInteger(placementBytesPerSecond) ||
  placementBytesPerSecond < 0
) {
  process.stderr.write(
    'usage: node bench/routing/load-relay.ts <pool file> <scrape period ms> [placement bytes/s]\n',
  );
  process.exit(2);
}
try {
  const relay = await startRelay({
    poolFiles: [poolFile],
    namespace: 'bench',
    host: '127.0.0.1',
    port: 0,
    token: undefined,
    tls: undefined,
    loadScrapeEveryMs: periodMs,
    placementBytesPerSecond,
    // The controller's default (`switchyard controller --heartbeat`).
    heartbeatMs: 10_000,
    env: process.env,
    logger: pino({ level: 'warn' }),
  });
  process.stdout.write(`${relay.url}\n`);
  process.once('SIGTERM', () => {
    relay.close();
    process.exit(0);
  });
} catch (err) {
  if (!(err instanceof RelayConfigError)) throw err;
  process.stderr.write(`${err.message}\n`);
  process.exit(2);
}
