import type * as NodeHttp from 'node:http';
import type * as NodeHttps from 'node:https';
import type { ControllerSession } from './stream-connection.ts';

/**
 * How long a kept-alive connection to the controller may sit idle before the sidecar closes it.
 * The controller's server closes idle connections after 65 s (`keepAliveTimeout`): a client that
 * reused a socket the server is closing at that moment would see ECONNRESET, so the client
 * closes first, well before. Node's agent also honours the server's `Keep-Alive: timeout=65`
 * hint (minus a second); this is the stricter of the two. Reports go every 10 s (1 s with
 * budgets), so a socket in use never reaches it.
 */
export const CONTROLLER_IDLE_TIMEOUT_MS = 30_000;

/**
 * The agent for the sidecar's short requests to the controller (reports; later other uploads):
 * one kept-alive connection per controller URL. Why: the controller's Service spreads new
 * connections over its replicas and each replica caches a token's TokenReview, so a new
 * connection per report meant a TLS handshake per report and a review by every replica in turn;
 * one kept connection lands the reports on one replica, which reviews the token once per
 * `--token-review-cache`. The stream keeps its own connection. Destroy it at shutdown.
 */
export function createControllerAgent(
  lib: typeof NodeHttp | typeof NodeHttps,
): NodeHttp.Agent | NodeHttps.Agent {
  return new lib.Agent({
    keepAlive: true,
    maxSockets: 1,
    maxFreeSockets: 1,
    timeout: CONTROLLER_IDLE_TIMEOUT_MS,
    // A report waits for the one connection rather than opening a second; the controller
    // answers each in milliseconds.
    scheduling: 'lifo',
  });
}

/**
 * A request on a reused kept-alive socket failed with ECONNRESET: the server closed the idle
 * socket just as the request went out (a replica restarting, or its idle timeout racing ours).
 * Worth one more try on a fresh connection when the request is idempotent (a report is the
 * sidecar's whole current state). Node's documentation recommends the same check.
 */
export function resetOnReusedSocket(req: NodeHttp.ClientRequest, err: Error): boolean {
  return req.reusedSocket && (err as NodeJS.ErrnoException).code === 'ECONNRESET';
}

/**
 * The options of a sidecar's JSON POST to the controller (a report, a placements upload): the
 * stream's credentials and CA, the shared kept-alive `agent` (false: a connection of its own).
 */
export function controllerPost(
  session: ControllerSession,
  agent: NodeHttp.Agent | false,
  timeoutMs: number,
  body: string,
): NodeHttps.RequestOptions {
  return {
    method: 'POST',
    agent,
    ca: session.ca,
    timeout: timeoutMs,
    headers: {
      authorization: `Bearer ${session.token}`,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'user-agent': 'switchyard-sidecar',
    },
  };
}
