/**
 * Client traffic from inside a test host (the app container of a "pod"), for faults that cut the
 * host off from the root namespace, where the test itself cannot reach the sidecar:
 *
 *   node test/k8s/netns-load.ts <sidecar url> [concurrency]
 *
 * Prints `load started`, then the counts as JSON once a second; on SIGTERM it finishes the
 * requests in flight, prints the final counts as JSON and exits.
 */
import { chatTo, keepSending } from './traffic.ts';

const url = process.argv[2] ?? 'http://127.0.0.1:8080';
const traffic = keepSending(
  chatTo(() => url),
  Number(process.argv[3] ?? 2),
);
process.stdout.write('load started\n');
const progress = setInterval(
  () => process.stdout.write(`${JSON.stringify({ progress: traffic.count() })}\n`),
  1_000,
);
process.once('SIGTERM', () => {
  clearInterval(progress);
  void traffic.stop().then((final) => {
    process.stdout.write(`${JSON.stringify({ final })}\n`, () => process.exit(0));
  });
});
