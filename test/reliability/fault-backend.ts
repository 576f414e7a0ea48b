/**
 * A misbehaving OpenAI backend on a raw `node:net` socket: it answers each request with exactly
 * the bytes a fault needs (a reset before the head, a head and then silence, a truncated chunk,
 * broken SSE framing, a head too large for any parser...), which an `http.Server` would refuse to
 * produce. Loopback only. The simulator (`switchyard sim`) is the well-behaved backend.
 */
import net from 'node:net';

/** What the backend does once it has read a request. */
export interface Fault {
  /** Written in order, each after `gapMs` (the first at once). */
  parts: (string | Buffer)[];
  /** After the parts: end cleanly (FIN), reset (RST), or hold the connection open and silent. */
  then: 'end' | 'reset' | 'stall';
  gapMs?: number;
}

const sseHead = (extra = ''): string =>
  'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-store\r\n' +
  `transfer-encoding: chunked\r\nconnection: close\r\n${extra}\r\n`;

/** One HTTP/1.1 chunk. */
export const chunk = (text: string): string =>
  `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;

/** An OpenAI chat completion chunk as an SSE event. */
export const sseEvent = (content: string): string =>
  `data: ${JSON.stringify({
    id: 'chatcmpl-fault',
    object: 'chat.completion.chunk',
    created: 0,
    model: 'm',
    choices: [{ index: 0, delta: { content }, finish_reason: null }],
  })}\n\n`;

const TWO_EVENTS = [chunk(sseEvent('Hello')), chunk(sseEvent(' world'))];

/** The faults of docs/reliability.md, by name. */
export const FAULTS = {
  /** A complete, correct stream: the control. */
  ok: {
    parts: [sseHead(), ...TWO_EVENTS, chunk('data: [DONE]\n\n'), '0\r\n\r\n'],
    then: 'end',
  },
  resetBeforeHeaders: { parts: [], then: 'reset' },
  /** A status line that is not HTTP: a parse error before any head. */
  garbageStatusLine: { parts: ['HTTP/1.1 OK maybe\r\n\r\n'], then: 'end' },
  /** A 64 KiB header: beyond Node's 16 KiB limit for a whole head. */
  oversizedHeaders: {
    parts: [sseHead(`x-padding: ${'a'.repeat(64 * 1024)}\r\n`), ...TWO_EVENTS, '0\r\n\r\n'],
    then: 'end',
  },
  headersThenStall: { parts: [sseHead()], then: 'stall' },
  /** A 503 head whose body (delimited by the connection's end) never comes. */
  errorHeadThenStall: {
    parts: ['HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\r\n'],
    then: 'stall',
  },
  resetMidStream: { parts: [sseHead(), ...TWO_EVENTS], then: 'reset', gapMs: 20 },
  stallMidStream: { parts: [sseHead(), ...TWO_EVENTS], then: 'stall', gapMs: 20 },
  /** A chunk that announces 256 bytes, delivers 20, and the connection ends. */
  truncatedChunk: {
    parts: [sseHead(), ...TWO_EVENTS, `100\r\ndata: {"id":"chatcmp`],
    then: 'end',
    gapMs: 20,
  },
  /** A chunk size line that is not hex. */
  badChunkSize: {
    parts: [sseHead(), ...TWO_EVENTS, 'zz\r\nnot a chunk\r\n'],
    then: 'end',
    gapMs: 20,
  },
  /** A JSON answer whose content-length promises more than is sent. */
  shortContentLength: {
    parts: [
      'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\nconnection: close\r\n\r\n',
      '{"id":"chatcmpl-fault","object":"chat.completion","choices":[',
    ],
    then: 'end',
    gapMs: 20,
  },
  /** Valid HTTP, invalid SSE: no `data:` prefixes, CR-only line ends, no blank line, no [DONE]. */
  badSseFraming: {
    parts: [
      sseHead(),
      chunk('garbage without a field\r'),
      chunk('data {"not":"framed"}\rdata:'),
      '0\r\n\r\n',
    ],
    then: 'end',
  },
} satisfies Record<string, Fault>;

export type FaultName = keyof typeof FAULTS;

export interface FaultBackend {
  /** `http://127.0.0.1:<port>` (a pool backend's `url` is this plus `/v1`). */
  url: string;
  port: number;
  /** Requests read so far (head and body complete). */
  requests: number;
  /** Connections accepted so far. */
  connections: number;
  /** Connections open right now. */
  open(): number;
  /** What the next requests get. */
  setFault(fault: Fault): void;
  /** Stops listening (new connections are refused) but keeps the port for `listen()`. */
  refuse(): Promise<void>;
  /** Listens again on the same port. */
  listen(): Promise<void>;
  /** Closes the listener and every connection. */
  close(): Promise<void>;
}

/** Reads one request (head and content-length body) off `socket`, then calls `onRequest`. */
function readRequests(socket: net.Socket, onRequest: () => void): void {
  let buffered = Buffer.alloc(0);
  socket.on('data', (data: Buffer) => {
    buffered = Buffer.concat([buffered, data]);
    for (;;) {
      const end = buffered.indexOf('\r\n\r\n');
      if (end === -1) return;
      const head = buffered.subarray(0, end).toString('latin1');
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      if (buffered.length < end + 4 + length) return;
      buffered = buffered.subarray(end + 4 + length);
      onRequest();
    }
  });
}

/** Writes `fault` to `socket`, then ends, resets or stalls it. */
export function play(socket: net.Socket, fault: Fault): void {
  const parts = [...fault.parts];
  const step = (): void => {
    if (socket.destroyed) return;
    const next = parts.shift();
    if (next !== undefined) {
      socket.write(next);
      if (parts.length === 0 || fault.gapMs === undefined) setImmediate(step);
      else setTimeout(step, fault.gapMs);
      return;
    }
    if (fault.then === 'end') socket.end();
    else if (fault.then === 'reset') socket.resetAndDestroy();
    // 'stall': leave it open until the peer or close() ends it
  };
  step();
}

export async function startFaultBackend(initial: Fault = FAULTS.ok): Promise<FaultBackend> {
  let fault = initial;
  const sockets = new Set<net.Socket>();
  const backend: FaultBackend = {
    url: '',
    port: 0,
    requests: 0,
    connections: 0,
    open: () => sockets.size,
    setFault(next) {
      fault = next;
    },
    refuse: () => new Promise((resolve) => server.close(() => resolve())),
    listen: () => listenOn(backend.port),
    async close() {
      for (const s of sockets) s.destroy();
      if (server.listening) await backend.refuse();
    },
  };
  const server = net.createServer((socket) => {
    backend.connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    readRequests(socket, () => {
      backend.requests++;
      play(socket, fault);
    });
  });
  const listenOn = (port: number): Promise<void> =>
    new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  await listenOn(0);
  backend.port = (server.address() as net.AddressInfo).port;
  backend.url = `http://127.0.0.1:${backend.port}`;
  return backend;
}
