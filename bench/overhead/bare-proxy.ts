/**
 * The floor our proxy library sets: a bare `http-proxy-3` passthrough with no policy, no body
 * read, no metrics, no logging. `node bench/overhead/bare-proxy.ts --target http://127.0.0.1:P`
 * prints its URL (`http://127.0.0.1:<port>`) once listening; SIGTERM exits (so `--cpu-prof`
 * writes its profile).
 *
 * It uses a keep-alive agent to the backend, as the sidecar does: without one every request
 * would pay a TCP connect and the "floor" would be artificially low.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { createProxyServer } from 'http-proxy-3';

const { values } = parseArgs({
  options: {
    target: { type: 'string' },
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
  },
});
if (values.target === undefined) {
  process.stderr.write('usage: node bench/overhead/bare-proxy.ts --target http://host:port\n');
  process.exit(2);
}

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });
const proxy = createProxyServer({ target: values.target, agent, xfwd: false });
proxy.on('error', (_err, _req, res) => {
  // A stray upstream error must not crash the floor we compare against.
  if (res instanceof http.ServerResponse && !res.headersSent) {
    res.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway');
  } else {
    res.destroy();
  }
});

const server = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
  proxy.web(req, res);
});

server.listen(Number(values.port), values.host, () => {
  const { address, port } = server.address() as AddressInfo;
  process.stdout.write(`http://${address}:${port}\n`);
});

const close = (): void => {
  server.close();
  server.closeAllConnections();
  agent.destroy();
  // Exit promptly and normally so --cpu-prof / --heap-prof write their files.
  setTimeout(() => process.exit(0), 100);
};
process.once('SIGTERM', close);
process.once('SIGINT', close);
