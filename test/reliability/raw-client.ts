/**
 * Raw TCP clients for abuse tests: bytes the `http` module would never send (bare CRs, two
 * content-lengths, a head one byte at a time), and what came back before the connection closed.
 */
import net from 'node:net';

export interface RawConnection {
  socket: net.Socket;
  /** Everything received so far. */
  received(): string;
  /** Resolves when the connection is closed (by either side), with what was received. */
  closed: Promise<{ received: string; atMs: number }>;
  /** Writes `text` one slice of `bytes` every `everyMs`, until done or closed. */
  trickle(text: string, everyMs: number, bytes?: number): void;
}

export function rawConnect(port: number, host = '127.0.0.1'): Promise<RawConnection> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = net.connect(port, host);
    let received = '';
    socket.setEncoding('latin1');
    socket.on('data', (data: string) => (received += data));
    const closed = new Promise<{ received: string; atMs: number }>((resolveClosed) =>
      socket.once('close', () => resolveClosed({ received, atMs: performance.now() - started })),
    );
    socket.on('error', () => undefined);
    socket.once('connect', () =>
      resolve({
        socket,
        received: () => received,
        closed,
        trickle(text, everyMs, bytes = 1) {
          let at = 0;
          const timer = setInterval(() => {
            if (socket.destroyed || at >= text.length) {
              clearInterval(timer);
              return;
            }
            socket.write(text.slice(at, at + bytes), 'latin1');
            at += bytes;
          }, everyMs);
          socket.once('close', () => clearInterval(timer));
        },
      }),
    );
    socket.once('error', reject);
  });
}

/** Sends `request` as is and resolves with everything received until the server closes, or `waitMs`. */
export async function rawExchange(port: number, request: string, waitMs = 2_000): Promise<string> {
  const connection = await rawConnect(port);
  connection.socket.write(request, 'latin1');
  const timer = setTimeout(() => connection.socket.destroy(), waitMs);
  const { received } = await connection.closed;
  clearTimeout(timer);
  return received;
}

/** The status code of the first response in `received`, or 0. */
export const statusOf = (received: string): number =>
  Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0);

/** A streamed chat body asking for `maxTokens` tokens: what the raw-socket tests send. */
export const streamedChatBody = (maxTokens: number): string =>
  JSON.stringify({
    model: 'm',
    stream: true,
    max_tokens: maxTokens,
    messages: [{ role: 'user', content: 'hello there' }],
  });
