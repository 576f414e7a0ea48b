/**
 * The objects `npm run bench:controller` puts on the real API server (harness/k8s/cluster.ts):
 * per pool a Service, one EndpointSlice (label `kubernetes.io/service-name`) and an
 * InferencePool with one `service` backend; ServiceAccount tokens (audience `switchyard`) for
 * the simulated sidecars; and a TLS certificate for the controller's stream port.
 *
 * Endpoint addresses come from 10.200.0.0/16. EndpointSlices refuse loopback addresses, so they
 * must be real-looking, but nothing ever connects to them: the bench starts no backends and
 * sends no traffic to any 10.x address.
 *
 * Writes go through a keep-alive HTTPS agent (the harness's `request` opens a new TLS connection
 * per call, which would add a handshake to every measured write).
 */
import https from 'node:https';
import type { Cluster } from '../../harness/k8s/cluster.ts';
import { makeServingTls, type ServingTls } from '../../harness/tls.ts';

export const BACKEND = 'b';
export const PORT = 8000;
export const SA = 'app';
export const AUDIENCE = 'switchyard';

export interface EndpointState {
  ip: string;
  ready: boolean;
}

export interface PoolFixture {
  index: number;
  namespace: string;
  name: string;
  service: string;
  slice: string;
  endpoints: EndpointState[];
  /** Addresses this pool may add (kept apart from every other pool's). */
  spare: string[];
  /** Writes made to this pool's slice so far (drives which change the next write makes). */
  writes: number;
}

/** Room per pool for addresses added during the rounds. */
export const SPARE_PER_POOL = 4;

/** The `i`-th address of 10.200.0.0/16 (never .0 or .255 in the last octet). */
export function benchAddress(i: number): string {
  const third = Math.floor(i / 254);
  if (third > 255) throw new RangeError('out of addresses in 10.200.0.0/16');
  return `10.200.${third}.${(i % 254) + 1}`;
}

export function maxPools(endpoints: number): number {
  return Math.floor((256 * 254) / (endpoints + SPARE_PER_POOL));
}

export function makePools(count: number, endpoints: number, namespaces: string[]): PoolFixture[] {
  const stride = endpoints + SPARE_PER_POOL;
  return Array.from({ length: count }, (_, i) => {
    const name = `pool-${String(i).padStart(4, '0')}`;
    const base = i * stride;
    return {
      index: i,
      namespace: namespaces[i % namespaces.length]!,
      name,
      service: `svc-${name}`,
      slice: `svc-${name}-1`,
      endpoints: Array.from({ length: endpoints }, (_, j) => ({
        ip: benchAddress(base + j),
        ready: true,
      })),
      spare: Array.from({ length: SPARE_PER_POOL }, (_, j) => benchAddress(base + endpoints + j)),
      writes: 0,
    };
  });
}

/** Plain code-unit order, as the controller sorts endpoint ids. */
const byCodeUnit = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The endpoint ids a snapshot of this pool must hold (routable = ready), as one sorted key. */
export function expectedKey(pool: PoolFixture): string {
  return pool.endpoints
    .filter((e) => e.ready)
    .map((e) => `${BACKEND}/${e.ip}:${PORT}`)
    .sort(byCodeUnit)
    .join(',');
}

/** The same key from a received snapshot's endpoints. */
export function snapshotKey(endpoints: readonly { id: string }[]): string {
  return endpoints
    .map((e) => e.id)
    .sort(byCodeUnit)
    .join(',');
}

export type Change = 'not-ready' | 'ready-again' | 'address-added' | 'address-removed';

/**
 * Changes the pool's endpoints in place so that its routable set changes. `readiness`: the
 * endpoint made not ready before is ready again, or else one more endpoint becomes not ready.
 * `address`: the spare address added before is removed, or else one is added.
 */
export function mutate(pool: PoolFixture, kind: 'readiness' | 'address'): Change {
  const n = pool.writes++;
  if (kind === 'readiness') {
    const down = pool.endpoints.find((e) => !e.ready);
    if (down !== undefined) {
      down.ready = true;
      return 'ready-again';
    }
    const original = pool.endpoints.filter((e) => !pool.spare.includes(e.ip));
    original[n % original.length]!.ready = false;
    return 'not-ready';
  }
  const added = pool.endpoints.findIndex((e) => pool.spare.includes(e.ip));
  if (added !== -1) {
    pool.endpoints.splice(added, 1);
    return 'address-removed';
  }
  pool.endpoints.push({ ip: pool.spare[n % pool.spare.length]!, ready: true });
  return 'address-added';
}

export function serviceObject(pool: PoolFixture): unknown {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: pool.service, namespace: pool.namespace },
    // Headless: the test cluster's Service range is a /24 (254 ClusterIPs), fewer than the fleet
    // bench's 1,000 pools; the controller reads the EndpointSlices, never the ClusterIP.
    spec: {
      clusterIP: 'None',
      ports: [{ name: 'http', port: 80, targetPort: PORT, protocol: 'TCP' }],
    },
  };
}

export function sliceObject(pool: PoolFixture): unknown {
  for (const e of pool.endpoints)
    if (!e.ip.startsWith('10.200.')) throw new Error(`not a bench address: ${e.ip}`);
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: pool.slice,
      namespace: pool.namespace,
      labels: { 'kubernetes.io/service-name': pool.service },
    },
    addressType: 'IPv4',
    endpoints: pool.endpoints.map((e) => ({ addresses: [e.ip], conditions: { ready: e.ready } })),
    ports: [{ name: 'http', port: PORT, protocol: 'TCP' }],
  };
}

export function poolObject(pool: PoolFixture): unknown {
  return {
    apiVersion: 'switchyard.dev/v1alpha1',
    kind: 'InferencePool',
    metadata: { name: pool.name, namespace: pool.namespace },
    spec: { backends: [{ name: BACKEND, service: { name: pool.service, port: 'http' } }] },
  };
}

export const paths = {
  namespaces: '/api/v1/namespaces',
  services: (ns: string) => `/api/v1/namespaces/${ns}/services`,
  slices: (ns: string) => `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`,
  pools: (ns: string) => `/apis/switchyard.dev/v1alpha1/namespaces/${ns}/inferencepools`,
  token: (ns: string, sa: string) => `/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`,
};

export interface ApiReply<T = unknown> {
  status: number;
  body: T;
  text: string;
}

/** A keep-alive JSON client for the API server (admin token). */
export class Api {
  private readonly agent: https.Agent;
  private readonly server: URL;
  private readonly token: string;

  constructor(cluster: Cluster, maxSockets = 32) {
    this.agent = new https.Agent({ ca: cluster.caPem, keepAlive: true, maxSockets });
    this.server = new URL(cluster.server);
    this.token = cluster.adminToken;
  }

  request<T = unknown>(method: string, path: string, body?: unknown): Promise<ApiReply<T>> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = https.request(
        {
          host: this.server.hostname,
          port: this.server.port,
          path,
          method,
          agent: this.agent,
          timeout: 30_000,
          headers: {
            accept: 'application/json',
            authorization: `Bearer ${this.token}`,
            ...(payload === undefined
              ? {}
              : {
                  'content-type': 'application/json',
                  'content-length': Buffer.byteLength(payload),
                }),
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('error', reject);
          res.on('end', () => {
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // keep the text
            }
            resolve({ status: res.statusCode ?? 0, body: parsed as T, text });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  /** Like `request`, but throws unless the status is one of `ok`. */
  async must<T = unknown>(
    method: string,
    path: string,
    body: unknown,
    ok: readonly number[] = [200, 201],
  ): Promise<ApiReply<T>> {
    const res = await this.request<T>(method, path, body);
    if (!ok.includes(res.status))
      throw new Error(`${method} ${path}: HTTP ${res.status}: ${res.text.slice(0, 500)}`);
    return res;
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Runs `fn` over `items` with at most `limit` at once. */
export async function inParallel<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, i: number) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** Namespaces, Services, EndpointSlices and InferencePools, created `concurrency` at a time. */
export async function createObjects(
  api: Api,
  pools: readonly PoolFixture[],
  namespaces: readonly string[],
  concurrency = 16,
): Promise<void> {
  for (const name of [...namespaces, 'switchyard'])
    await api.must(
      'POST',
      paths.namespaces,
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
      [201, 409],
    );
  await inParallel(pools, concurrency, (p) =>
    api.must('POST', paths.services(p.namespace), serviceObject(p)),
  );
  await inParallel(pools, concurrency, (p) =>
    api.must('POST', paths.slices(p.namespace), sliceObject(p)),
  );
  await inParallel(pools, concurrency, (p) =>
    api.must('POST', paths.pools(p.namespace), poolObject(p)),
  );
}

/**
 * `count` ServiceAccount tokens of `namespace`'s `app` account (audience `switchyard`): every
 * call to the TokenRequest API gives a distinct token, as every pod of a real fleet has its own.
 */
export async function mintTokens(
  api: Api,
  cluster: Cluster,
  namespace: string,
  count: number,
  concurrency = 16,
): Promise<string[]> {
  const first = await cluster.createServiceAccountToken(namespace, SA, { audience: AUDIENCE });
  const more = await inParallel(Array.from({ length: count - 1 }), concurrency, async () => {
    const res = await api.must<{ status: { token: string } }>(
      'POST',
      paths.token(namespace, SA),
      {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: { audiences: [AUDIENCE] },
      },
      [201],
    );
    return res.body.status.token;
  });
  return [first.token, ...more];
}

/** A CA and a serving certificate for 127.0.0.1 (shared with the e2e tests). */
export function makeTls(dir: string): ServingTls {
  return makeServingTls(dir, 'switchyard-bench');
}

/**
 * A watch on every EndpointSlice, as the controller has one: records when the API server
 * delivered each (namespace/name, resourceVersion) to a watcher on this machine. That is the
 * floor under the controller's latency (API server write + watch fan-out).
 */
export class SliceWatch {
  private readonly seen = new Map<string, number>();
  private req: ReturnType<typeof https.request> | undefined;
  private closed = false;
  private resourceVersion: string | undefined;
  restarts = 0;
  private readonly cluster: Cluster;
  private readonly agent: https.Agent;

  constructor(cluster: Cluster) {
    this.cluster = cluster;
    this.agent = new https.Agent({ ca: cluster.caPem, keepAlive: false });
  }

  start(): void {
    const server = new URL(this.cluster.server);
    const query = new URLSearchParams({
      watch: 'true',
      labelSelector: 'kubernetes.io/service-name',
      ...(this.resourceVersion === undefined ? {} : { resourceVersion: this.resourceVersion }),
    });
    let buffer = '';
    this.req = https.request(
      {
        host: server.hostname,
        port: server.port,
        path: `/apis/discovery.k8s.io/v1/endpointslices?${query.toString()}`,
        agent: this.agent,
        headers: { authorization: `Bearer ${this.cluster.adminToken}` },
      },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const at = performance.now();
          buffer += chunk;
          for (let nl = buffer.indexOf('\n'); nl !== -1; nl = buffer.indexOf('\n')) {
            const line = buffer.slice(0, nl);
            buffer = buffer.slice(nl + 1);
            if (line.trim() === '') continue;
            try {
              const event = JSON.parse(line) as {
                object?: {
                  metadata?: { namespace?: string; name?: string; resourceVersion?: string };
                };
              };
              const m = event.object?.metadata;
              if (m?.resourceVersion === undefined) continue;
              this.resourceVersion = m.resourceVersion;
              const key = `${m.namespace}/${m.name}@${m.resourceVersion}`;
              if (!this.seen.has(key)) this.seen.set(key, at);
            } catch {
              // a partial or foreign line
            }
          }
        });
        res.on('close', () => this.again());
      },
    );
    this.req.on('error', () => this.again());
    this.req.end();
  }

  private again(): void {
    if (this.closed) return;
    this.restarts++;
    setTimeout(() => this.start(), 100).unref();
  }

  /** When the watch delivered this version of the slice (performance.now()), if it did. */
  deliveredAt(namespace: string, name: string, resourceVersion: string): number | undefined {
    return this.seen.get(`${namespace}/${name}@${resourceVersion}`);
  }

  stop(): void {
    this.closed = true;
    this.req?.destroy();
    this.agent.destroy();
  }
}
