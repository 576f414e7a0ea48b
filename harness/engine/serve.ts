/**
 * Runs vLLM servers on the tiny models by hand, the way the engine test starts them: for probing
 * with curl, capturing fixtures (scripts/engine/capture-fixtures.sh) or calibrating the simulator.
 *
 *   node harness/engine/serve.ts [--seed 1] [--name tiny] [--api-key KEY] [--count 1]
 *
 * Installs vLLM and makes the model first if needed, prints one line per server once it serves
 * (`<url> pid <pid> seed <seed> ...`), and stops them all on Ctrl-C or SIGTERM. Logs go to
 * $TMPDIR/switchyard-engine-serve-<pid>-<n>.log.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { engineVenv, tinyModel } from './install.ts';
import { startVllm, stopVllms, type VllmServer } from './vllm.ts';

const { values } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    name: { type: 'string', default: 'tiny' },
    'api-key': { type: 'string' },
    count: { type: 'string', default: '1' },
  },
});
const seed = Number(values.seed);
const count = Number(values.count);
if (!Number.isInteger(seed) || seed < 0) throw new Error('--seed must be a non-negative integer');
if (!Number.isInteger(count) || count < 1) throw new Error('--count must be a positive integer');

const venv = await engineVenv();
const model = await tinyModel(seed);
const servers: VllmServer[] = [];
let stopping = false;
const stop = async (): Promise<void> => {
  if (stopping) return;
  stopping = true;
  await stopVllms(servers);
  process.exit(0);
};
process.on('SIGINT', () => void stop());
process.on('SIGTERM', () => void stop());

servers.push(
  ...(await Promise.all(
    Array.from({ length: count }, (_, i) =>
      startVllm({
        venv,
        model,
        servedName: values.name,
        apiKey: values['api-key'],
        logFile: join(tmpdir(), `switchyard-engine-serve-${process.pid}-${i}.log`),
      }),
    ),
  )),
);
for (const server of servers) {
  const memory = await server.memory();
  console.log(
    `${server.url} pid ${server.pid} seed ${seed} ready in ${(server.startupMs / 1000).toFixed(1)} s, ` +
      `PSS ${Math.round(memory.pssBytes / 2 ** 20)} MiB, log ${server.options.logFile}`,
  );
}
// Runs until a signal stops it.
setInterval(() => undefined, 60_000);
