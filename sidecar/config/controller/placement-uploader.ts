/**
 * Uploads this sidecar's prompt placements of one pool to the controller (issue 45, the
 * fleet-wide view; docs/snapshot-protocol.md, "Placements"): every `everyMs` (100 ms) the batch
 * the outbox has waiting, POSTed to `…/placements` with the stream's credentials, but only while
 * the open stream's response carried `x-switchyard-placements` (a controller that relays them; an
 * older one would answer 404 to every upload).
 *
 * Ten uploads a second per pool must not cost a TCP (and TLS) handshake each: they go on the
 * sidecar's one connection to the controller, beside its streams and reports
 * (controller-connections.ts). At most one upload is in flight; a tick that finds one still going sends
 * nothing (what waits goes with the next). A failed upload is dropped, not retried: the
 * placements are advisory, fresher ones follow within 100 ms, and retrying would pile up work
 * exactly when the controller is slow. Failures are logged at debug level and counted.
 */
import type { Logger } from 'pino';
import type { PoolPlacements } from '../../../crds/snapshot.ts';
import {
  postJson,
  type ControllerConnections,
  type ControllerPost,
  type ControllerSession,
} from './controller-connections.ts';
import { describeError } from './describe-error.ts';

/** The contract's limit of one upload body. */
export const MAX_PLACEMENTS_UPLOAD_BYTES = 64 * 1024;

/** One batch every 100 ms, as the controller relays them. */
export const PLACEMENTS_UPLOAD_EVERY_MS = 100;

export interface PlacementUploaderOptions {
  url: URL;
  /** The sidecar's connection to the controller, shared with its streams and reports. */
  connections: ControllerConnections;
  log: Logger;
  /** Default `PLACEMENTS_UPLOAD_EVERY_MS`. */
  everyMs?: number | undefined;
  /** An upload without an answer in this long is given up. Default 2 s. */
  timeoutMs?: number | undefined;
  /** The batch waiting, at most `maxBytes` of JSON, removed from the queue; undefined if none. */
  take(maxBytes: number): PoolPlacements | undefined;
  /** The controller took `count` placements (a 2xx). */
  uploaded?: ((count: number) => void) | undefined;
  /** An upload failed (network, timeout, a refusal): its batch is dropped. */
  failed?: (() => void) | undefined;
}

export class PlacementUploader {
  readonly #options: PlacementUploaderOptions;
  #session: ControllerSession | undefined;
  #timer: NodeJS.Timeout | undefined;
  #inFlight: ControllerPost | undefined;
  #closed = false;

  constructor(options: PlacementUploaderOptions) {
    this.#options = options;
  }

  /** True while uploads go (a stream whose controller relays placements is open). */
  get active(): boolean {
    return this.#session !== undefined;
  }

  /** A stream opened with these credentials, and its controller relays placements. */
  start(session: ControllerSession): void {
    if (this.#closed) return;
    this.stop();
    this.#session = session;
    this.#timer = setInterval(
      () => this.#tick(),
      this.#options.everyMs ?? PLACEMENTS_UPLOAD_EVERY_MS,
    );
    this.#timer.unref();
  }

  /** The stream closed (or its controller does not relay): no more uploads; one in flight ends. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#session = undefined;
  }

  /** Stops for good: the upload in flight is ended. */
  close(): void {
    this.#closed = true;
    this.stop();
    this.#inFlight?.abort();
  }

  /** Resolves once no upload is in flight. */
  async closed(): Promise<void> {
    await this.#inFlight?.done;
  }

  #tick(): void {
    const session = this.#session;
    if (this.#closed || session === undefined || this.#inFlight !== undefined) return;
    const { log } = this.#options;
    let batch: PoolPlacements | undefined;
    try {
      batch = this.#options.take(MAX_PLACEMENTS_UPLOAD_BYTES);
    } catch (err) {
      log.warn({ err: describeError(err) }, 'placements not uploaded: taking the batch failed');
      return;
    }
    if (batch === undefined) return;
    this.#send(session, batch);
  }

  #send(session: ControllerSession, batch: PoolPlacements): void {
    const { log, url, connections } = this.#options;
    const timeoutMs = this.#options.timeoutMs ?? 2_000;
    const count = batch.placements.length;
    const post = postJson(connections, url, session, JSON.stringify(batch), timeoutMs);
    this.#inFlight = post;
    void post.done
      .then(({ status, error }) => {
        this.#inFlight = undefined;
        if (status >= 200 && status < 300) {
          log.trace({ placements: count }, 'placements uploaded');
          this.#options.uploaded?.(count);
          return;
        }
        this.#options.failed?.();
        if (status === 0) {
          if (!this.#closed)
            log.debug({ err: describeError(error), placements: count }, 'placements upload failed');
          return;
        }
        log.debug({ status, placements: count }, 'placements upload refused; batch dropped');
        // A controller that relays no placements (turned off since the stream opened) says so:
        // stop until the next stream tells again.
        if (status === 404) this.stop();
      })
      // Never an unhandled rejection (it would end the sidecar): a bug here costs one batch.
      .catch((err: unknown) =>
        log.error({ err: describeError(err) }, 'handling an upload answer failed; uploads go on'),
      );
  }
}
