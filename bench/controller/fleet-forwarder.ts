/**
 * The fleet bench's stand-in for the chart's Service: a TCP forwarder on loopback that hands each
 * new connection to the next controller replica, round-robin, as kube-proxy spreads a Service's
 * connections over its ready endpoints. TLS passes through untouched (the replicas share one
 * serving certificate for 127.0.0.1), so the sidecar's client sees the controller as it would
 * through a Service.
 *
 * A replica that refuses the connection (killed) is skipped and the next one tried: in a cluster
 * the dead pod leaves the Service's endpoints within seconds; here that happens at the first
 * refusal, which makes the kill measure a little kinder than a cluster (said in the docs).
 */
import net from 'node:net';

export interface Forwarder {
  /** The loopback port the subscribers connect to. */
  port: number;
  /** Connections handed to each replica (by index in `backends`). */
  handed: number[];
  /**
   * Of the handed connections that ended, which side closed first: the replica (a controller's
   * idle timeout, GOAWAY, a kill) or the subscriber (its watchdog, a reconnect).
   */
  closedFirstBy: { replica: number; subscriber: number };
  close(): void;
}

export function startForwarder(backends: readonly number[], offset: number): Promise<Forwarder> {
  let next = offset % backends.length;
  const handed = backends.map(() => 0);
  const closedFirstBy = { replica: 0, subscriber: 0 };
  const sockets = new Set<net.Socket>();
  const connectTo = (client: net.Socket, tries: number): void => {
    const i = next;
    next = (next + 1) % backends.length;
    const upstream = net.connect({ host: '127.0.0.1', port: backends[i]!, noDelay: true });
    sockets.add(upstream);
    let open = false;
    let ended = false;
    const endedBy = (side: 'replica' | 'subscriber'): void => {
      if (!open || ended) return;
      ended = true;
      closedFirstBy[side]++;
    };
    upstream.once('connect', () => {
      open = true;
      handed[i]!++;
      client.pipe(upstream);
      upstream.pipe(client);
    });
    upstream.on('error', () => {
      if (!open && tries + 1 < backends.length) {
        sockets.delete(upstream);
        connectTo(client, tries + 1);
      } else client.destroy();
    });
    upstream.on('close', () => {
      sockets.delete(upstream);
      endedBy('replica');
      if (open) client.destroy();
    });
    // A half-close counts too: the side that sent its FIN first is the one that ended it.
    upstream.on('end', () => endedBy('replica'));
    client.on('end', () => endedBy('subscriber'));
    client.on('close', () => {
      endedBy('subscriber');
      upstream.destroy();
    });
  };
  const server = net.createServer({ noDelay: true }, (client) => {
    sockets.add(client);
    client.on('error', () => undefined);
    client.on('close', () => sockets.delete(client));
    connectTo(client, 0);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      resolve({
        port: (server.address() as net.AddressInfo).port,
        handed,
        closedFirstBy,
        close: () => {
          server.close();
          for (const s of sockets) s.destroy();
        },
      });
    });
  });
}
