import type { IncomingMessage } from 'node:http';

export type BodyResult =
  | { kind: 'ok'; body: Buffer }
  /** `drained`: the rest of the body was read and dropped, so the connection can answer cleanly. */
  | { kind: 'too-large'; drained: boolean }
  | { kind: 'aborted' };

/**
 * How much of an oversized body is read and dropped before the 413 goes out. Answering while the
 * client is still sending makes many clients (fetch among them) see a broken pipe instead of the
 * 413; past this much, the connection is cut instead.
 */
export const OVERSIZE_DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;

/**
 * Reads a request body into one buffer, up to `limitBytes`. The sidecar needs the whole body once
 * to parse the model, stream flag and prompt prefix; responses, not requests, are what must never
 * be buffered.
 */
export function readBody(req: IncomingMessage, limitBytes: number): Promise<BodyResult> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limitBytes + OVERSIZE_DRAIN_LIMIT_BYTES) {
    return Promise.resolve({ kind: 'too-large', drained: false });
  }
  const chunks: Buffer[] = [];
  let size = 0;
  return readUntil<BodyResult>(req, {
    aborted: { kind: 'aborted' },
    onData: (chunk, settle) => {
      size += chunk.length;
      if (size <= limitBytes) {
        chunks.push(chunk);
      } else if (size > limitBytes + OVERSIZE_DRAIN_LIMIT_BYTES) {
        req.pause();
        settle({ kind: 'too-large', drained: false });
      } else if (chunks.length > 0) {
        chunks.length = 0; // over the limit: keep reading, stop keeping
      }
    },
    onEnd: () =>
      size > limitBytes
        ? { kind: 'too-large', drained: true }
        : { kind: 'ok', body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) },
  });
}

/** How `drainRest` ended: the body all read, cut at the bound (reading paused), or the client left. */
export type DrainResult = 'drained' | 'cut' | 'aborted';

/**
 * Reads and drops the rest of a request body whose start was already consumed (a streamed upload
 * found too large on the way), so that the answer can go out once the client has stopped
 * sending. Answering and closing while the client is still sending leaves its bytes unread in
 * our socket; closing such a socket sends a reset, and a reset can reach the client before it
 * has read the answer, so it sees a broken pipe instead of the 413. Past `maxBytes` more, reading
 * stops (the caller answers and closes anyway); the server's request timeout bounds the time.
 */
export function drainRest(
  req: IncomingMessage,
  maxBytes = OVERSIZE_DRAIN_LIMIT_BYTES,
): Promise<DrainResult> {
  if (req.complete) return Promise.resolve('drained');
  let size = 0;
  return readUntil<DrainResult>(req, {
    aborted: 'aborted',
    onData: (chunk, settle) => {
      size += chunk.length;
      if (size > maxBytes) {
        req.pause();
        settle('cut');
      }
    },
    onEnd: () => 'drained',
  });
}

/**
 * Reads a request body until `onData` settles or the body ends (`onEnd`'s result); `aborted` when
 * the client leaves first. The listeners go with the first result, so a later event changes
 * nothing. The body flows from the start, also after an unpipe (which leaves it paused).
 */
function readUntil<T>(
  req: IncomingMessage,
  handlers: {
    aborted: T;
    onData: (chunk: Buffer, settle: (result: T) => void) => void;
    onEnd: () => T;
  },
): Promise<T> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (result: T): void => {
      if (settled) return;
      settled = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAbort);
      req.off('close', onClose);
      resolve(result);
    };
    const onData = (chunk: Buffer): void => handlers.onData(chunk, settle);
    const onEnd = (): void => settle(handlers.onEnd());
    const onAbort = (): void => settle(handlers.aborted);
    const onClose = (): void => {
      if (!req.complete) settle(handlers.aborted);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAbort);
    req.on('close', onClose);
    req.resume();
  });
}
