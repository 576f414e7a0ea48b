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
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const settle = (result: BodyResult): void => {
      if (settled) return;
      settled = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAbort);
      req.off('close', onClose);
      resolve(result);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= limitBytes) {
        chunks.push(chunk);
      } else if (size > limitBytes + OVERSIZE_DRAIN_LIMIT_BYTES) {
        req.pause();
        settle({ kind: 'too-large', drained: false });
      } else if (chunks.length > 0) {
        chunks.length = 0; // over the limit: keep reading, stop keeping
      }
    };
    const onEnd = (): void => {
      if (size > limitBytes) settle({ kind: 'too-large', drained: true });
      else
        settle({
          kind: 'ok',
          body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size),
        });
    };
    const onAbort = (): void => settle({ kind: 'aborted' });
    const onClose = (): void => {
      if (!req.complete) settle({ kind: 'aborted' });
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAbort);
    req.on('close', onClose);
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
  return new Promise((resolve) => {
    let size = 0;
    let settled = false;
    const settle = (result: DrainResult): void => {
      if (settled) return;
      settled = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAbort);
      req.off('close', onClose);
      resolve(result);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > maxBytes) {
        req.pause();
        settle('cut');
      }
    };
    const onEnd = (): void => settle('drained');
    const onAbort = (): void => settle('aborted');
    const onClose = (): void => settle(req.complete ? 'drained' : 'aborted');
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAbort);
    req.on('close', onClose);
    req.resume(); // unpiped streams stay paused until told to flow
  });
}
