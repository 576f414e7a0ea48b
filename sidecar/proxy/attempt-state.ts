/**
 * One attempt's life as data: the states an upstream try goes through, and every transition
 * between them in one pure function, like linkerd's `enum State`. The exchange (exchange.ts) feeds
 * it what happened and performs the effects it returns, in order; it decides nothing itself.
 *
 * The rule that shapes it: the upstream's head is held until its first body byte. Until then
 * nothing has reached the client, so a failure (refused, reset, 5xx, 429, a stall past
 * `timeouts.firstByte`) may still be retried on another endpoint; from the first byte on, never.
 */
import type { Outcome } from '../policy/index.ts';
import type { CodeClass } from './metrics.ts';

export type AttemptState =
  /** Connecting, sending, or waiting for the response head. The first-byte deadline runs. */
  | { readonly kind: 'awaiting-head' }
  /** A 2xx or 4xx head arrived and is held until the first body byte. The deadline runs. */
  | { readonly kind: 'awaiting-first-byte'; readonly status: number }
  /**
   * A 5xx or 429 head that is not retried: its outcome is reported, and it is relayed once its
   * body starts; when that does not happen by the same deadline, the client gets a 504.
   */
  | { readonly kind: 'awaiting-error-body'; readonly status: number }
  /** The head went to the client with the first body byte; the body streams. */
  | { readonly kind: 'streaming'; readonly status: number }
  /** A relayed 5xx or 429 streams (its outcome was reported with its head). */
  | { readonly kind: 'streaming-error'; readonly status: number }
  /** A 5xx or 429 retried elsewhere: its body is read and dropped so the connection is reused. */
  | { readonly kind: 'draining' }
  /** Nothing more happens on this attempt. */
  | { readonly kind: 'done' };

export type AttemptEvent =
  /** The upstream's response head; `retryAfterMs` from a 429's Retry-After. */
  | { readonly kind: 'head'; readonly status: number; readonly retryAfterMs?: number | undefined }
  /** A body chunk arrived. While streaming, the exchange writes it to the client. */
  | { readonly kind: 'data' }
  /** The body is complete. */
  | { readonly kind: 'end' }
  /**
   * The request failed or the response broke off (refused, reset, connect or idle timeout).
   * `clientHeld`: the client held the stream paused (its socket full) and the upstream sent
   * nothing since; whatever ended it then is the client's doing (see `transition`).
   */
  | { readonly kind: 'upstream-error'; readonly code: string; readonly clientHeld?: boolean }
  /** `timeouts.firstByte` passed since the request was sent. */
  | { readonly kind: 'deadline' }
  /** The client went away. */
  | { readonly kind: 'client-gone' }
  /** After this attempt's 5xx or 429 head, the exchange sent a retry elsewhere. */
  | { readonly kind: 'superseded' }
  /**
   * Flow control ends this sheddable attempt to free its slot for a request of a higher
   * priority (flow-gate.ts); only while nothing of it has reached the client (`preemptable`).
   */
  | { readonly kind: 'preempted' };

/** Why the client gets an error of the sidecar's own (502, or 504 when `timeout`). */
export type Failure =
  /** The request failed before any response head (`code`: ECONNREFUSED, ECONNECT_TIMEOUT...). */
  | { readonly kind: 'transport'; readonly code: string; readonly timeout: boolean }
  /** A head arrived, then the connection broke before the first body byte. */
  | { readonly kind: 'reset-before-first-byte'; readonly timeout: false }
  /** Nothing of the response came within `timeouts.firstByte`. */
  | { readonly kind: 'no-first-byte'; readonly timeout: true }
  /** A 5xx or 429 head that could not be retried, and no body came within `timeouts.firstByte`. */
  | { readonly kind: 'no-error-body'; readonly status: number; readonly timeout: true };

export type Effect =
  /** Tell the balancer how the attempt ended, and count it under `code` (once per attempt). */
  | {
      readonly kind: 'report';
      readonly code: CodeClass;
      readonly retryAfterMs?: number | undefined;
    }
  /** The first body byte arrived now: the balancer's TTFT sample. */
  | { readonly kind: 'first-byte' }
  /** From now on, bound the silence between body chunks by `timeouts.idle`. */
  | { readonly kind: 'watch-idle' }
  /** Write the held response head to the client. */
  | { readonly kind: 'write-head' }
  /** End the client's response. */
  | { readonly kind: 'end-client' }
  /** The upstream broke off mid-body: end the client's response so it does not hang. */
  | { readonly kind: 'break-client' }
  | { readonly kind: 'destroy-upstream' }
  /** Read and drop the rest of the body (for a bounded time) so the connection can be reused. */
  | { readonly kind: 'drain-upstream' }
  /** Send another attempt if one is allowed; otherwise answer the client with this failure. */
  | { readonly kind: 'retry-or-fail'; readonly failure: Failure }
  /** Send another attempt if one is allowed (then `superseded` follows); otherwise relay this one. */
  | { readonly kind: 'retry-or-relay' }
  /** Answer the client with this failure (no retry: one was already declined). */
  | { readonly kind: 'fail'; readonly failure: Failure }
  /** Give the request back to its pool's flow gate, to be sent again when there is room. */
  | { readonly kind: 'requeue' };

export interface Transition {
  readonly state: AttemptState;
  readonly effects: readonly Effect[];
}

/** Error codes of the upstream request that mean a timeout (connect, idle), not a failure. */
const TIMEOUT_CODES: ReadonlySet<string> = new Set(['ECONNECT_TIMEOUT', 'ETIMEDOUT']);

export const INITIAL_STATE: AttemptState = Object.freeze({ kind: 'awaiting-head' });
const DONE: AttemptState = Object.freeze({ kind: 'done' });
const DRAINING: AttemptState = Object.freeze({ kind: 'draining' });

const FIRST_BYTE: Effect = { kind: 'first-byte' };
const WATCH_IDLE: Effect = { kind: 'watch-idle' };
const WRITE_HEAD: Effect = { kind: 'write-head' };
const END_CLIENT: Effect = { kind: 'end-client' };
const BREAK_CLIENT: Effect = { kind: 'break-client' };
const DESTROY: Effect = { kind: 'destroy-upstream' };
const DRAIN: Effect = { kind: 'drain-upstream' };
const RETRY_OR_RELAY: Effect = { kind: 'retry-or-relay' };
const REPORT_ERROR: Effect = { kind: 'report', code: 'error' };
const REPORT_TIMEOUT: Effect = { kind: 'report', code: 'timeout' };
const REPORT_ABORTED: Effect = { kind: 'report', code: 'aborted' };
const REPORT_PREEMPTED: Effect = { kind: 'report', code: 'preempted' };
const REQUEUE: Effect = { kind: 'requeue' };
const RESET: Failure = { kind: 'reset-before-first-byte', timeout: false };
const NO_FIRST_BYTE: Failure = { kind: 'no-first-byte', timeout: true };

function retryOrFail(failure: Failure): Effect {
  return { kind: 'retry-or-fail', failure };
}

function fail(failure: Failure): Effect {
  return { kind: 'fail', failure };
}

/** The attempt ends: `effects` are the last it asks for. */
function finished(...effects: Effect[]): Transition {
  return { state: DONE, effects };
}

/** The client left before the outcome was reported: counted aborted, the upstream dropped. */
const CLIENT_LEFT: Transition = finished(REPORT_ABORTED, DESTROY);
/** The client left after the outcome was reported (with a 5xx or 429 head): upstream dropped. */
const CLIENT_LEFT_REPORTED: Transition = finished(DESTROY);
/**
 * A stream that broke off while the client held it paused: a server (or a proxy in front of it)
 * that drops a reader who stopped reading, or one that paused its generation meanwhile, did so
 * because of the client. Counted aborted, as a client that left, never against the endpoint.
 */
const BROKEN_WHILE_CLIENT_HELD: Transition = finished(REPORT_ABORTED, DESTROY, BREAK_CLIENT);
/**
 * Preempted: neutral to the balancer (the server did nothing wrong), the upstream request
 * dropped (a model server frees the slot when its client leaves), the request queued again.
 */
const PREEMPTED: Transition = finished(REPORT_PREEMPTED, DESTROY, REQUEUE);
/** Nothing of the response by `timeouts.firstByte`: a timeout, retried elsewhere when allowed. */
const FIRST_BYTE_LATE: Transition = finished(REPORT_TIMEOUT, DESTROY, retryOrFail(NO_FIRST_BYTE));

/** Whether the first-byte deadline still matters: the exchange clears its timer in every other state. */
export function awaitsFirstByte(state: AttemptState): boolean {
  return (
    state.kind === 'awaiting-head' ||
    state.kind === 'awaiting-first-byte' ||
    state.kind === 'awaiting-error-body'
  );
}

/**
 * Whether flow control may preempt the attempt: nothing of its answer has reached the client
 * (the head is held until the first body byte), so sending it again later loses nothing.
 */
export function isPreemptable(state: AttemptState): boolean {
  return state.kind === 'awaiting-head' || state.kind === 'awaiting-first-byte';
}

/** A status another endpoint might answer better: retried when allowed, and bad for health. */
export function isRetryableStatus(status: number): boolean {
  return status === 429 || status >= 500;
}

/** What the balancer is told for a counted code (`streamed`: whether a TTFT was a first token). */
export function outcomeOf(
  code: CodeClass,
  streamed: boolean,
  retryAfterMs: number | undefined,
): Outcome {
  switch (code) {
    case '2xx':
      return { kind: 'success', streamed };
    case '429':
      return { kind: 'rate-limited', retryAfterMs };
    case '5xx':
    case 'error':
    case 'timeout':
      return { kind: 'error' };
    case '4xx':
    case 'aborted':
    case 'preempted':
      return { kind: 'neutral' };
  }
}

/** A relayed response's end: a 2xx is a success, anything else is the client's business. */
function reportEnd(status: number): Effect {
  return { kind: 'report', code: status >= 200 && status < 300 ? '2xx' : '4xx' };
}

/**
 * The next state and the effects to perform, in order; undefined when the event changes nothing
 * (it cannot happen in this state, or it is late news about an attempt already given up).
 */
export function transition(state: AttemptState, event: AttemptEvent): Transition | undefined {
  switch (state.kind) {
    case 'awaiting-head':
      switch (event.kind) {
        case 'head': {
          const { status } = event;
          if (!isRetryableStatus(status))
            return { state: { kind: 'awaiting-first-byte', status }, effects: [] };
          const report: Effect = {
            kind: 'report',
            code: status === 429 ? '429' : '5xx',
            retryAfterMs: event.retryAfterMs,
          };
          return {
            state: { kind: 'awaiting-error-body', status },
            effects: [report, RETRY_OR_RELAY],
          };
        }
        case 'upstream-error': {
          const timeout = TIMEOUT_CODES.has(event.code);
          return finished(
            timeout ? REPORT_TIMEOUT : REPORT_ERROR,
            retryOrFail({ kind: 'transport', code: event.code, timeout }),
          );
        }
        case 'deadline':
          return FIRST_BYTE_LATE;
        case 'client-gone':
          return CLIENT_LEFT;
        case 'preempted':
          return PREEMPTED;
        default:
          return undefined;
      }

    case 'awaiting-first-byte':
      switch (event.kind) {
        case 'data':
          return {
            state: { kind: 'streaming', status: state.status },
            effects: [FIRST_BYTE, WATCH_IDLE, WRITE_HEAD],
          };
        case 'end':
          return finished(WRITE_HEAD, END_CLIENT, reportEnd(state.status));
        case 'upstream-error':
          return finished(REPORT_ERROR, DESTROY, retryOrFail(RESET));
        case 'deadline':
          return FIRST_BYTE_LATE;
        case 'client-gone':
          return CLIENT_LEFT;
        case 'preempted':
          return PREEMPTED;
        default:
          return undefined;
      }

    case 'awaiting-error-body':
      switch (event.kind) {
        case 'superseded':
          return { state: DRAINING, effects: [DRAIN] };
        case 'data':
          return {
            state: { kind: 'streaming-error', status: state.status },
            effects: [WATCH_IDLE, WRITE_HEAD],
          };
        case 'end':
          return finished(WRITE_HEAD, END_CLIENT);
        case 'upstream-error':
          return finished(DESTROY, fail(RESET));
        case 'deadline':
          return finished(
            DESTROY,
            fail({ kind: 'no-error-body', status: state.status, timeout: true }),
          );
        case 'client-gone':
          return CLIENT_LEFT_REPORTED;
        default:
          return undefined;
      }

    case 'streaming':
      switch (event.kind) {
        case 'end':
          return finished(END_CLIENT, reportEnd(state.status));
        case 'upstream-error':
          if (event.clientHeld === true) return BROKEN_WHILE_CLIENT_HELD;
          return finished(REPORT_ERROR, DESTROY, BREAK_CLIENT);
        case 'client-gone':
          return CLIENT_LEFT;
        default:
          return undefined; // 'data': the exchange writes the chunk
      }

    case 'streaming-error':
      switch (event.kind) {
        case 'end':
          return finished(END_CLIENT);
        case 'upstream-error':
          return finished(DESTROY, BREAK_CLIENT);
        case 'client-gone':
          return CLIENT_LEFT_REPORTED;
        default:
          return undefined;
      }

    case 'draining':
      switch (event.kind) {
        case 'client-gone':
          return CLIENT_LEFT_REPORTED;
        case 'end':
        case 'upstream-error':
          return finished();
        default:
          return undefined;
      }

    case 'done':
      return undefined;
  }
}
