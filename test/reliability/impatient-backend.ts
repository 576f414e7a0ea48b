/**
 * A backend that drops readers who stop reading, as servers and the proxies in front of them do
 * (nginx's `send_timeout`, Envoy's stream idle timeout): it streams a long SSE answer in 4 KB
 * chunks, waiting for each write to drain, and resets the connection when a write has not
 * drained within `--give-up-ms`. A client that reads gets the whole stream.
 *
 *   node test/reliability/impatient-backend.ts --give-up-ms 1000 --chunks 5000
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    'give-up-ms': { type: 'string', default: '1000' },
    chunks: { type: 'string', default: '5000' },
  },
});
const giveUpMs = Number(values['give-up-ms']);
const chunks = Number(values.chunks);

const event = (i: number): string =>
  `data: ${JSON.stringify({
    id: 'chatcmpl-impatient',
    object: 'chat.completion.chunk',
    created: 0,
    model: 'm',
    choices: [{ index: 0, delta: { content: `${i} ${'x'.repeat(4_000)}` }, finish_reason: null }],
  })}\n\n`;

let gaveUp = 0;
const server = http.createServer((req, res) => {
  req.resume();
  req.once('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
    let sent = 0;
    const more = (): void => {
      while (sent < chunks) {
        sent++;
        if (res.write(event(sent))) continue;
        const timer = setTimeout(() => {
          gaveUp++;
          process.stdout.write(`gave up ${gaveUp}\n`);
          res.socket?.resetAndDestroy();
        }, giveUpMs);
        res.once('drain', () => {
          clearTimeout(timer);
          more();
        });
        return;
      }
      res.end('data: [DONE]\n\n');
    };
    more();
  });
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`http://127.0.0.1:${port}\n`);
});
