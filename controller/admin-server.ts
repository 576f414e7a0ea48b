import http from 'node:http';
import type { ControllerMetrics } from './metrics.ts';

export interface AdminServerOptions {
  metrics: Pick<ControllerMetrics, 'registry'>;
  /** Whether the caches the controller reconciles from have synced (`/readyz`). */
  synced: () => boolean;
  isLeader: () => boolean;
}

/** The admin port: `/metrics`, `/healthz` (the process runs), `/readyz` (the caches synced). */
export function adminServer(options: AdminServerOptions): http.Server {
  const { metrics, synced, isLeader } = options;
  return http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/metrics') {
      metrics.registry.metrics().then(
        (text: string) => {
          res.writeHead(200, { 'content-type': metrics.registry.contentType });
          res.end(text);
        },
        () => {
          res.writeHead(500);
          res.end();
        },
      );
      return;
    }
    const body = (status: number, value: unknown): void => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    if (path === '/healthz') body(200, { status: 'ok' });
    else if (path === '/readyz') {
      const ready = synced();
      body(ready ? 200 : 503, { synced: ready, leader: isLeader() });
    } else
      body(404, { error: { code: 'unknown_url', message: 'try /metrics, /healthz, /readyz' } });
  });
}
