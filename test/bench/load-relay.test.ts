/**
 * The routing benchmark's load relay (bench/routing/load-relay.ts, `switchyard bench --load-source
 * controller`): the controller's stream server and load monitor without Kubernetes. Real
 * simulators, the relay and real sidecars subscribed to it with `--controller`, as in a cluster.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { balancePool, scratchDir } from '../../harness/pool-file.ts';
import {
  controllerSidecarArgs,
  startNodeScript,
  startSim,
  startSwitchyard,
  stopAll,
  type RunningProcess,
} from '../../harness/processes.ts';
import { debugBackends, eventually } from '../helpers.ts';

const RELAY = join(import.meta.dirname, '../../bench/routing/load-relay.ts');

describe('bench load relay', () => {
  it('serves the pool file as a snapshot and streams the load it scrapes to every sidecar', async () => {
    const { dir, cleanup } = await scratchDir();
    const started: RunningProcess[] = [];
    try {
      const sims = [await startSim('a'), await startSim('b')];
      started.push(...sims);
      const poolFile = join(dir, 'pool.yaml');
      await writeFile(poolFile, balancePool(sims.map((s) => s.url)));
      const token = join(dir, 'token');
      await writeFile(token, 'bench');
      const relay = await startNodeScript(RELAY, [poolFile, '100']);
      started.push(relay);
      const sidecars: RunningProcess[] = [];
      for (const id of ['app-1', 'app-2']) {
        const sidecar = await startSwitchyard([
          ...controllerSidecarArgs({
            controllerUrl: relay.url,
            namespace: 'bench',
            pool: 'test',
            tokenFile: token,
            sidecarId: id,
          }),
          '--log-level',
          'warn',
        ]);
        started.push(sidecar);
        sidecars.push(sidecar);
      }
      // Each sidecar has the pool from the stream, and every endpoint's queue: before any request
      // (so no ORCA header), from the relay's scrapes, since a sidecar with --controller leaves
      // scraping to the controller.
      for (const sidecar of sidecars) {
        await eventually(
          async () => {
            const debug = await debugBackends(sidecar);
            return (
              debug.pool === 'test' &&
              debug.endpoints.length === 2 &&
              debug.endpoints.every((e) => e.reported !== null && e.reported.running === 0)
            );
          },
          10_000,
          "the pool and the relay's load on every endpoint",
        );
      }
      const client = new OpenAI({
        baseURL: `${sidecars[0]!.url}/v1`,
        apiKey: 'client-key',
        maxRetries: 0,
      });
      const answer = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hello' }],
      });
      assert.ok((answer.choices[0]?.message.content ?? '').length > 0);
    } finally {
      await stopAll(started);
      await cleanup();
    }
  });

  it('refuses a pool file with a problem, naming the field', async () => {
    const { dir, cleanup } = await scratchDir();
    try {
      const poolFile = join(dir, 'pool.yaml');
      await writeFile(poolFile, balancePool(['ftp://10.0.0.1']));
      await assert.rejects(startNodeScript(RELAY, [poolFile, '100']), (err: Error) => {
        assert.match(err.message, /exited \(2\) before it was ready/);
        assert.match(err.message, /spec\.backends\[0\]\.url/);
        return true;
      });
    } finally {
      await cleanup();
    }
  });
});
