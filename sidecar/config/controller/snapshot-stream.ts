import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { applyEndpointsDelta } from '../../../crds/snapshot-delta.ts';
import {
  ENDPOINTS_EVENT,
  LOAD_EVENT,
  PLACEMENTS_EVENT,
  PLACEMENTS_HEADER,
  parseEndpointsDelta,
  parseLoad,
  parseShares,
  parseSnapshot,
  SHARES_EVENT,
  SNAPSHOT_EVENT,
  type PoolLoad,
  type PoolPlacements,
  type PoolShares,
  type PoolSnapshot,
} from '../../../crds/snapshot.ts';
import { describeError } from './describe-error.ts';
import { PlacementsEvents, placementsBudget } from './placements-event.ts';
import type { ControllerConnections, ControllerSession } from './controller-connections.ts';
import type { SseEvent } from './sse-parser.ts';
import { StreamConnection } from './stream-connection.ts';

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

/**
 * The wait before reconnect attempt number `failures` (0 for the first retry): uniform in
 * [0, min(maxMs, initialMs × 2^failures)] ("full jitter").
 */
export function backoffDelayMs(
  failures: number,
  backoff: BackoffOptions,
  random: () => number,
): number {
  const ceiling = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(failures, 40));
  const r = Math.min(1, Math.max(0, random()));
  return Math.floor(r * ceiling);
}

export interface SnapshotStreamOptions {
  url: URL;
  /** The controller's origin, for log lines. */
  controller: string;
  /** The sidecar's connection to the controller, shared with its other pools. */
  connections: ControllerConnections;
  namespace: string;
  pool: string;
  sidecarId: string;
  tokenFile: string;
  caFile: string | undefined;
  heartbeatTimeoutMs: number;
  backoff: BackoffOptions;
  random: () => number;
  maxEventSize: number;
  log: Logger;
  /**
   * A stream is open (status 200, an event stream of our protocol version).
   * `placementsBytesPerSecond`: its `x-switchyard-placements` header, when the controller relays
   * placements (issue 45); undefined from one that does not.
   */
  onConnected(session: ControllerSession, placementsBytesPerSecond?: number): void;
  /** The open stream closed. */
  onDisconnected(): void;
  /**
   * A valid snapshot arrived (whole, or built from an `endpoints` delta); true when it is now the
   * one in force (ours, applied), the base of the next delta.
   */
  onSnapshot(snapshot: PoolSnapshot): boolean;
  /** Every `snapshot` and `endpoints` event as received, before it is checked (benchmarks). */
  onStreamEvent?: ((event: SseEvent) => void) | undefined;
  /** An `endpoints` delta was applied, or could not be (false: the connection is being dropped). */
  onDelta?: ((applied: boolean) => void) | undefined;
  /** A valid `load` event arrived: what the pool's servers last reported. */
  onLoad(load: PoolLoad): void;
  /** A valid `shares` event arrived: this sidecar's shares of the pool's budgets. */
  onShares?(shares: PoolShares): void;
  /** A valid `placements` event arrived (`bytes`: its data's size); see placements-event.ts. */
  onPlacements?: ((placements: PoolPlacements, bytes: number) => void) | undefined;
}

/**
 * The subscription to the pool's snapshot stream: one connection at a time, each with the token
 * and CA read afresh, reconnecting with exponential backoff and full jitter until `close()`.
 * Refusals name what to check; invalid events are logged and skipped.
 */
export class SnapshotStream {
  readonly #options: SnapshotStreamOptions;
  readonly #stop = new AbortController();
  #closed = false;
  #connection: StreamConnection | undefined;
  #session: ControllerSession | undefined;
  readonly #placements: PlacementsEvents;
  /**
   * The snapshot in force as this connection delivered it (issue 46): the only base an `endpoints`
   * delta applies to. None at the start of a connection: the controller sends the full snapshot
   * first, and one from the cache or an earlier connection may be older than the delta's base.
   */
  #base: PoolSnapshot | undefined;
  /** The first rejected delta is logged at warn, later ones at debug (each reconnects at once). */
  #warnedDelta = false;
  /** This connection is being dropped for a rejected delta: its remaining events are ignored. */
  #dropping = false;

  constructor(options: SnapshotStreamOptions) {
    this.#options = options;
    this.#placements = new PlacementsEvents(options.log);
  }

  /** True while a stream is open. */
  get connected(): boolean {
    return this.#session !== undefined;
  }

  /** Connects, and reconnects after every end, until `close()`. Never rejects. */
  async run(): Promise<void> {
    const { log, backoff, random } = this.#options;
    let failures = 0;
    while (!this.#closed) {
      let delivered = false;
      try {
        delivered = await this.#connectOnce();
      } catch (err) {
        log.error({ err: describeError(err) }, 'unexpected failure of the controller connection');
      }
      if (this.#closed) return;
      if (delivered) failures = 0; // the stream worked: the next wait starts small again
      const delayMs = backoffDelayMs(failures, backoff, random);
      failures += 1;
      log.debug({ delayMs, failures }, 'reconnecting to the controller after a pause');
      try {
        await sleep(delayMs, undefined, { signal: this.#stop.signal });
      } catch {
        return; // closed
      }
    }
  }

  /** Ends the connection and the loop; `run()` resolves soon after. */
  close(): void {
    this.#closed = true;
    this.#stop.abort();
    this.#connection?.destroy();
  }

  /** Reads the credentials, then streams once. Resolves true when the stream delivered any data. */
  async #connectOnce(): Promise<boolean> {
    const { tokenFile, caFile, log } = this.#options;
    let token: string;
    try {
      token = (await readFile(tokenFile, 'utf8')).trim();
    } catch (err) {
      log.error({ tokenFile, err: describeError(err) }, 'cannot read the token file; retrying');
      return false;
    }
    if (token.length === 0) {
      log.error({ tokenFile }, 'the token file is empty; retrying');
      return false;
    }
    let ca: string | undefined;
    if (caFile !== undefined) {
      try {
        ca = await readFile(caFile, 'utf8');
      } catch (err) {
        log.error({ caFile, err: describeError(err) }, 'cannot read the CA file; retrying');
        return false;
      }
    }
    if (this.#closed) return false;
    return this.#streamOnce({ token, ca });
  }

  /** One connection, from request to close. Resolves true when the stream delivered any data. */
  async #streamOnce(session: ControllerSession): Promise<boolean> {
    this.#base = undefined;
    this.#dropping = false;
    const connection = new StreamConnection(this.#options, session, {
      closed: () => this.#closed,
      opened: (headers) => {
        this.#session = session;
        this.#options.onConnected(session, placementsBudget(headers[PLACEMENTS_HEADER]));
      },
      lost: () => {
        this.#session = undefined;
        this.#options.onDisconnected();
      },
      event: (event) => this.#onEvent(event),
      refused: (status, code, message) => this.#logRefusal(status, code, message),
    });
    this.#connection = connection;
    try {
      return await connection.done;
    } finally {
      this.#connection = undefined;
    }
  }

  #onEvent(event: SseEvent): void {
    const { log } = this.#options;
    if (this.#closed || this.#dropping) return;
    if (event.type === LOAD_EVENT) {
      this.#onLoad(event);
      return;
    }
    if (event.type === SHARES_EVENT) {
      this.#onShares(event);
      return;
    }
    if (event.type === PLACEMENTS_EVENT) {
      if (this.#options.onPlacements !== undefined)
        this.#placements.accept(event.data, this.#options.onPlacements);
      return;
    }
    if (event.type === ENDPOINTS_EVENT || event.type === SNAPSHOT_EVENT)
      this.#options.onStreamEvent?.(event);
    if (event.type === ENDPOINTS_EVENT) {
      this.#onDelta(event);
      return;
    }
    if (event.type !== SNAPSHOT_EVENT) {
      log.debug({ type: event.type }, 'ignoring an event of unknown type');
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(event.data);
    } catch {
      // Not the parser's message: it quotes the text, which may hold an API key.
      log.error(
        { id: event.id, size: event.data.length },
        'snapshot rejected: not valid JSON; the last good snapshot stays in force',
      );
      return;
    }
    const parsed = parseSnapshot(value);
    if (!parsed.ok) {
      log.error(
        { id: event.id, errors: parsed.errors },
        'snapshot rejected: it does not match the snapshot schema; the last good snapshot stays in force',
      );
      return;
    }
    // Whether it is ours, and new, is the applier's to say (snapshot-applier.ts).
    this.#base = this.#options.onSnapshot(parsed.value) ? parsed.value : undefined;
  }

  /**
   * An `endpoints` delta (issue 46): applied to the snapshot this connection delivered, when it is
   * the delta's base and the list built hashes as the controller's. Anything else means this
   * sidecar no longer knows the pool's endpoints: it drops the stream, and the controller sends
   * the full snapshot on the next connection (at once: the connection delivered data).
   */
  #onDelta(event: SseEvent): void {
    let value: unknown;
    try {
      value = JSON.parse(event.data);
    } catch {
      this.#rejectDelta(event.id, 'not valid JSON');
      return;
    }
    const parsed = parseEndpointsDelta(value);
    if (!parsed.ok) {
      this.#rejectDelta(event.id, 'it does not match the delta schema', parsed.errors);
      return;
    }
    if (this.#base === undefined) {
      this.#rejectDelta(event.id, 'no snapshot of this connection to apply it to');
      return;
    }
    const result = applyEndpointsDelta(this.#base, parsed.value);
    if (!result.ok) {
      this.#rejectDelta(event.id, result.reason);
      return;
    }
    this.#options.onDelta?.(true);
    this.#base = this.#options.onSnapshot(result.snapshot) ? result.snapshot : undefined;
  }

  #rejectDelta(id: string | undefined, reason: string, errors?: unknown): void {
    const { log } = this.#options;
    const fields = { id, reason, ...(errors === undefined ? {} : { errors }) };
    const message =
      'endpoints delta not applied; reconnecting for the full snapshot (the last good one stays in force meanwhile)';
    if (this.#warnedDelta) log.debug(fields, message);
    else log.warn(fields, message);
    this.#warnedDelta = true;
    this.#base = undefined;
    this.#dropping = true;
    this.#options.onDelta?.(false);
    this.#connection?.destroy();
  }

  /**
   * A `load` event: advisory, so a bad one is dropped at debug level (the next arrives within a
   * second) and never affects the snapshot in force.
   */
  #onLoad(event: SseEvent): void {
    const { log } = this.#options;
    let value: unknown;
    try {
      value = JSON.parse(event.data);
    } catch {
      log.debug({ size: event.data.length }, 'load event ignored: not valid JSON');
      return;
    }
    const parsed = parseLoad(value);
    if (!parsed.ok) {
      log.debug({ errors: parsed.errors }, 'load event ignored: it does not match the load schema');
      return;
    }
    this.#options.onLoad(parsed.value);
  }

  /**
   * A `shares` event. A bad one is logged and dropped: the last good shares stay in force (they
   * are what this sidecar may spend; never zero nor the whole budget because of a bad message).
   */
  #onShares(event: SseEvent): void {
    const { log } = this.#options;
    let value: unknown;
    try {
      value = JSON.parse(event.data);
    } catch {
      log.warn(
        { size: event.data.length },
        'shares event ignored: not valid JSON; the last shares stay in force',
      );
      return;
    }
    const parsed = parseShares(value);
    if (!parsed.ok) {
      log.warn(
        { errors: parsed.errors },
        'shares event ignored: it does not match the shares schema; the last shares stay in force',
      );
      return;
    }
    this.#options.onShares?.(parsed.value);
  }

  #logRefusal(status: number, code: string | undefined, message: string | undefined): void {
    const { log, controller, tokenFile, namespace, pool } = this.#options;
    const fields = { status, code, controller, ...(message === undefined ? {} : { message }) };
    if (status === 401)
      log.error(
        { ...fields, tokenFile },
        'the controller rejected the token (401): check that the token file holds a projected ' +
          'ServiceAccount token with audience "switchyard" that has not expired; retrying',
      );
    else if (status === 403)
      log.error(
        fields,
        `the controller refused pool ${namespace}/${pool} (403): the token's ServiceAccount must ` +
          `be in namespace "${namespace}" (a sidecar reads only pools of its own namespace; check --namespace), ` +
          `and the pod the token is bound to must be labelled switchyard.dev/pool=${pool} (message says which); retrying`,
      );
    else if (status === 404)
      log.error(
        fields,
        `pool ${namespace}/${pool} not found (404): check --namespace and --pool; retrying ` +
          '(the pool may not be created yet)',
      );
    else log.warn(fields, `the controller answered ${status} instead of a stream; retrying`);
  }
}
