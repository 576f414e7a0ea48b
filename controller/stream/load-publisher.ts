import type { Logger } from 'pino';
import { LoadMonitor } from '../../lib/load-scrape/monitor.ts';
import type { ControllerMetrics } from '../metrics.ts';
import type { SnapshotServer } from './snapshot-server.ts';

/**
 * Server-reported load for a stream server's subscribers (docs/controller.md, "Server-reported
 * load"): the endpoints of the pools its own sidecars subscribe to, scraped every `periodMs` and
 * sent as `load` events, once started. The controller runs one per replica, `switchyard relay` one;
 * undefined (nothing scraped) when the period is 0.
 */
export function loadPublisher(
  stream: SnapshotServer,
  periodMs: number,
  logger: Logger,
  metrics: ControllerMetrics,
): LoadMonitor | undefined {
  if (periodMs <= 0) return undefined;
  return new LoadMonitor({
    periodMs,
    logger,
    pools: () => stream.subscribedEndpoints(),
    publish: (key, poolLoad) => stream.publishLoad(key, poolLoad),
    onScrape: (result, seconds) => {
      metrics.loadScrapes.inc({ result });
      metrics.loadScrapeDuration.observe(seconds);
    },
  });
}
