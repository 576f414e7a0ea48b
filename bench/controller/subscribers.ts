/**
 * Light simulated sidecars for `npm run bench:controller`: each one is a single HTTPS stream
 * (`GET /v1/namespaces/{ns}/pools/{name}/snapshots?sidecar=…`, its own bearer token, the test CA)
 * with a minimal Server-Sent Events parser, that records which snapshot it holds and when it
 * arrived (`performance.now()` in the bench process). Like the real sidecar it reconnects with
 * exponential backoff and full jitter (0.5 s doubling to 30 s) and, unless turned off, POSTs a
 * report after every new snapshot and every `reportEveryMs`, over its own keep-alive connection.
 * No routing, no validation beyond JSON.parse: the controller's side of the stream is what is
 * measured.
 */
import https from 'node:https';
import { snapshotKey, type PoolFixture } from './fixture.ts';

export interface SubscriberOptions {
  index: number;
  pool: PoolFixture;
  token: string;
  /** The controller's stream URL, e.g. https://127.0.0.1:8443. */
  baseUrl: string;
  ca: string;
  /** 0: no reports. */
  reportEveryMs: number;
  /** Called with every snapshot event, after the subscriber's state was updated. */
  onSnapshot: (subscriber: Subscriber, atMs: number) => void;
}

interface SnapshotEvent {
  version: number;
  hash: string;
  endpoints: { id: string }[];
}

export class Subscriber {
  readonly id: string;
  readonly pool: PoolFixture;
  readonly token: string;
  private readonly options: SubscriberOptions;
  /** Endpoint ids of the snapshot held (see `snapshotKey`). */
  key: string | undefined;
  version: number | undefined;
  hash: string | undefined;
  endpointIds: string[] = [];
  /** When the first snapshot arrived / the first 200 came (performance.now()). */
  firstSnapshotAt: number | undefined;
  connectedAt: number | undefined;
  snapshots = 0;
  bytes = 0;
  connects = 0;
  /** Non-200 answers by status, and connection errors. */
  refusals: Record<string, number> = {};
  /** Streams that ended while the bench was running. */
  drops = 0;
  reports = { sent: 0, ok: 0, failed: 0 };
  private failures = 0;
  private closed = false;
  private req: ReturnType<typeof https.get> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private reportTimer: NodeJS.Timeout | undefined;
  private readonly reportAgent: https.Agent;
  private reportBusy = false;

  constructor(options: SubscriberOptions) {
    this.options = options;
    this.pool = options.pool;
    this.token = options.token;
    this.id = `bench-${options.index}`;
    this.reportAgent = new https.Agent({ ca: options.ca, keepAlive: true, maxSockets: 1 });
  }

  start(): void {
    if (this.closed) return;
    const { pool } = this;
    const url = new URL(
      `/v1/namespaces/${pool.namespace}/pools/${pool.name}/snapshots?sidecar=${this.id}`,
      this.options.baseUrl,
    );
    // agent: false: a connection of its own and no TLS session reuse, like separate pods.
    this.req = https.get(
      url,
      {
        ca: this.options.ca,
        agent: false,
        headers: { authorization: `Bearer ${this.options.token}`, accept: 'text/event-stream' },
      },
      (res) => {
        if (res.statusCode !== 200) {
          this.refused(String(res.statusCode));
          res.resume();
          return;
        }
        this.connects++;
        this.failures = 0;
        this.connectedAt ??= performance.now();
        res.setEncoding('utf8');
        let buffer = '';
        res.on('data', (chunk: string) => {
          const at = performance.now();
          this.bytes += chunk.length;
          buffer += chunk;
          for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            this.onBlock(block, at);
          }
        });
        res.on('close', () => {
          if (this.closed) return;
          this.drops++;
          this.retry();
        });
      },
    );
    this.req.on('error', (err: NodeJS.ErrnoException) => this.refused(err.code ?? err.message));
  }

  private refused(reason: string): void {
    this.refusals[reason] = (this.refusals[reason] ?? 0) + 1;
    this.req?.destroy();
    this.retry();
  }

  private retry(): void {
    if (this.closed || this.retryTimer !== undefined) return;
    const ceiling = Math.min(30_000, 500 * 2 ** this.failures++);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.start();
    }, Math.random() * ceiling);
  }

  private onBlock(block: string, at: number): void {
    let type = 'message';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') type = value;
      else if (field === 'data') data.push(value);
    }
    if (type !== 'snapshot' || data.length === 0) return;
    const snapshot = JSON.parse(data.join('\n')) as SnapshotEvent;
    const changed = snapshot.hash !== this.hash;
    this.version = snapshot.version;
    this.hash = snapshot.hash;
    this.endpointIds = snapshot.endpoints.map((e) => e.id);
    this.key = snapshotKey(snapshot.endpoints);
    this.snapshots++;
    this.firstSnapshotAt ??= at;
    this.options.onSnapshot(this, at);
    if (changed && this.options.reportEveryMs > 0) {
      this.report();
      if (this.reportTimer === undefined) {
        // Periodic reports, at a random phase so 500 sidecars do not report in lockstep.
        const every = this.options.reportEveryMs;
        this.reportTimer = setTimeout(() => {
          this.reportTimer = setInterval(() => this.report(), every);
          this.report();
        }, Math.random() * every);
      }
    }
  }

  /** A report as the sidecar sends it: applied version and hash, every endpoint healthy. */
  private report(): void {
    if (this.closed || this.reportBusy || this.version === undefined) return;
    this.reportBusy = true;
    const body = JSON.stringify({
      sidecar: this.id,
      appliedVersion: this.version,
      appliedHash: this.hash,
      endpoints: this.endpointIds.map((id) => ({
        id,
        breaker: 'closed',
        errorRate: 0,
        rateLimitRate: 0,
        ewmaTtftMs: 0,
        inFlight: 0,
      })),
    });
    const url = new URL(
      `/v1/namespaces/${this.pool.namespace}/pools/${this.pool.name}/reports`,
      this.options.baseUrl,
    );
    this.reports.sent++;
    const req = https.request(
      url,
      {
        method: 'POST',
        agent: this.reportAgent,
        timeout: 10_000,
        headers: {
          authorization: `Bearer ${this.options.token}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          if (res.statusCode === 204) this.reports.ok++;
          else this.reports.failed++;
          this.reportBusy = false;
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('report timed out')));
    req.on('error', () => {
      this.reports.failed++;
      this.reportBusy = false;
    });
    req.end(body);
  }

  close(): void {
    this.closed = true;
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    if (this.reportTimer !== undefined) clearTimeout(this.reportTimer);
    this.req?.destroy();
    this.reportAgent.destroy();
  }
}
