/**
 * The cluster's DNS for test/node/: answers `<service>.<namespace>.svc.cluster.local` with the
 * Service's ClusterIP, read from the API server, on the node's peer address (port 53, UDP). A
 * stand-in for CoreDNS (docs/node.md): pods need only Service names (the sidecar dials
 * `<release>.<namespace>.svc`), and this is some 100 lines instead of another Go build.
 *
 * A, for a Service with a ClusterIP; an empty answer (NODATA) for other types of a Service's
 * name; NXDOMAIN for everything else (the resolver's search-list tries and any outside name).
 */
import { createSocket, type Socket } from 'node:dgram';
import type { Cluster } from '../../harness/k8s/cluster.ts';

const TYPE_A = 1;
const CLASS_IN = 1;
const SERVICE_NAME =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc\.cluster\.local$/;

export interface ClusterDns {
  /** Queries answered so far, by outcome. */
  counts: { a: number; nodata: number; nxdomain: number };
  close(): Promise<void>;
}

interface Question {
  id: number;
  /** Lower case, no trailing dot. */
  name: string;
  type: number;
  /** The question section as received (echoed in the answer). */
  section: Buffer;
  recursionDesired: boolean;
}

function parseQuestion(msg: Buffer): Question | undefined {
  if (msg.length < 17 || msg.readUInt16BE(4) !== 1) return undefined;
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    const length = msg[at];
    if (length === undefined || length > 63) return undefined;
    at += 1;
    if (length === 0) break;
    labels.push(
      msg
        .subarray(at, at + length)
        .toString('latin1')
        .toLowerCase(),
    );
    at += length;
  }
  if (at + 4 > msg.length) return undefined;
  return {
    id: msg.readUInt16BE(0),
    name: labels.join('.'),
    type: msg.readUInt16BE(at),
    section: msg.subarray(12, at + 4),
    recursionDesired: (msg[2]! & 0x01) !== 0,
  };
}

function answer(q: Question, rcode: number, ipv4?: string): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(q.id, 0);
  // QR, authoritative, RD echoed, RA; rcode.
  header.writeUInt16BE(0x8400 | (q.recursionDesired ? 0x0100 : 0) | 0x0080 | rcode, 2);
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(ipv4 === undefined ? 0 : 1, 6);
  if (ipv4 === undefined) return Buffer.concat([header, q.section]);
  const record = Buffer.alloc(16);
  record.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
  record.writeUInt16BE(TYPE_A, 2);
  record.writeUInt16BE(CLASS_IN, 4);
  record.writeUInt32BE(5, 6); // TTL 5 s: Services change during the test
  record.writeUInt16BE(4, 10);
  ipv4.split('.').forEach((octet, i) => record.writeUInt8(Number(octet), 12 + i));
  return Buffer.concat([header, q.section, record]);
}

/** Serves DNS on `address`:53 until close(). */
export async function startClusterDns(cluster: Cluster, address: string): Promise<ClusterDns> {
  const counts = { a: 0, nodata: 0, nxdomain: 0 };
  const socket: Socket = createSocket('udp4');
  const clusterIp = async (name: string): Promise<string | undefined> => {
    const match = SERVICE_NAME.exec(name);
    if (match === null) return undefined;
    const res = await cluster.request<{ spec?: { clusterIP?: string } }>(
      'GET',
      `/api/v1/namespaces/${match[3]}/services/${match[1]}`,
    );
    return res.status === 200 ? (res.body.spec?.clusterIP ?? 'None') : undefined;
  };
  let closed = false;
  // A lookup still waiting on the API server when the test closes the server must not answer
  // into the closed socket: send() throws there, as an unhandled rejection after the test ended.
  const reply = (buf: Buffer, port: number, address: string): void => {
    if (!closed) socket.send(buf, port, address);
  };
  socket.on('message', (msg, from) => {
    const q = parseQuestion(msg);
    if (q === undefined) return;
    void clusterIp(q.name).then(
      (ip) => {
        let response: Buffer;
        if (ip === undefined) {
          counts.nxdomain++;
          response = answer(q, 3);
        } else if (q.type === TYPE_A && /^\d+\.\d+\.\d+\.\d+$/.test(ip)) {
          counts.a++;
          response = answer(q, 0, ip);
        } else {
          counts.nodata++;
          response = answer(q, 0);
        }
        reply(response, from.port, from.address);
      },
      () => reply(answer(q, 2), from.port, from.address), // SERVFAIL
    );
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(53, address, () => {
      socket.off('error', reject);
      resolve();
    });
  });
  return {
    counts,
    close: () =>
      new Promise((resolve) => {
        closed = true;
        socket.close(() => resolve());
      }),
  };
}
