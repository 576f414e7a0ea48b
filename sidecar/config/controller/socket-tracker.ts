import type { ClientRequest } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Every socket the controller client's requests opened, until its handle is closed, so that
 * `close()` can end them all and resolve only when none is left (no timer, socket or request
 * outlives the client: tested).
 */
export class SocketTracker {
  readonly #sockets = new Map<Socket, Promise<void>>();

  track(req: ClientRequest): void {
    req.on('socket', (socket) => {
      if (this.#sockets.has(socket)) return;
      this.#sockets.set(
        socket,
        new Promise<void>((resolveSocket) =>
          socket.once('close', () => {
            this.#sockets.delete(socket);
            resolveSocket();
          }),
        ),
      );
    });
  }

  /** Destroys every tracked socket; resolves once all are closed. */
  async closeAll(): Promise<void> {
    for (const socket of this.#sockets.keys()) socket.destroy();
    await Promise.all(this.#sockets.values());
  }
}
