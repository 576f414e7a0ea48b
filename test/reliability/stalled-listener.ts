/**
 * Slow accept: a backend process that listens with a backlog of 1 and then does not accept for
 * `--stall-ms` (its event loop is blocked, as in a GC pause or a hung server). The kernel
 * completes the TCP handshake for at most two connections and drops further SYNs, so connects
 * hang; the first two connect but get no answer. After the stall it serves correct streams.
 *
 *   node test/reliability/stalled-listener.ts --stall-ms 5000   # prints its URL, then stalls
 */
import net from 'node:net';
import { parseArgs } from 'node:util';
import { FAULTS, play } from './fault-backend.ts';

const { values } = parseArgs({ options: { 'stall-ms': { type: 'string', default: '5000' } } });
const stallMs = Number(values['stall-ms']);

const server = net.createServer((socket) => {
  socket.on('error', () => undefined);
  socket.once('data', () => play(socket, FAULTS.ok));
});
server.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
  const { port } = server.address() as net.AddressInfo;
  process.stdout.write(`http://127.0.0.1:${port}\n`, () => {
    // Blocks this thread: nothing is accepted until it returns.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, stallMs);
    process.stdout.write('accepting\n');
  });
});
