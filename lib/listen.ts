/**
 * Listening on an address, shared by the controller's and the sidecar's servers (which never
 * import each other).
 */
import type { AddressInfo, Server } from 'node:net';

/** An address to listen on; port 0 picks a free one. */
export interface HostPort {
  host: string;
  port: number;
}

/** Listens on `at` and resolves with the URL it is reachable at (`scheme://host:port`). */
export function listen(server: Server, at: HostPort, scheme = 'http'): Promise<string> {
  return new Promise((resolveUrl, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host, () => {
      server.off('error', reject);
      const address = server.address() as AddressInfo;
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolveUrl(`${scheme}://${host}:${address.port}`);
    });
  });
}
