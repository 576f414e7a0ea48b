/**
 * The controller never crashes on an object the API server accepts. Random InferencePools (the
 * reconcile core's fuzz arbitraries, with a fixed seed) are created, patched and deleted on a
 * real API server, which rejects what the CRD's schema and CEL rules refuse; a running
 * controller must stay up through all the rest, keep its stream serving, and write the status of
 * every pool still there for its latest generation: it got stuck on none of them.
 *
 * SWITCHYARD_K8S_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { startCluster, waitFor, type Cluster } from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import { mutate, mutation, poolDocument, type Json } from '../../harness/pool-arbitraries.ts';
import type { RunningProcess } from '../../harness/processes.ts';
import { recordFigure } from '../reliability/figures.ts';
import { createNamespaces, startPlainController } from './test-controller.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';
const NS = 'apps';
const POOLS = `/apis/switchyard.dev/v1alpha1/namespaces/${NS}/inferencepools`;
const SEED = 20_260_6;
const CREATES = 250;

interface Stored {
  metadata: { name: string; generation: number };
  status?: { observedGeneration?: number };
}

describe(
  'the controller on random pools the API server accepts',
  { skip: !enabled && 'SWITCHYARD_K8S_TESTS=0' },
  () => {
    let cluster: Cluster;
    let controller: RunningProcess;

    before(async () => {
      cluster = await startCluster();
      await installInferencePoolCrd(cluster);
      await createNamespaces(cluster, [NS, 'switchyard']);
      await cluster.applyYaml(
        `apiVersion: v1
kind: Service
metadata: {name: vllm, namespace: ${NS}}
spec: {ports: [{name: http, port: 80, targetPort: 8000}]}
---
apiVersion: v1
kind: Secret
metadata: {name: provider-key, namespace: ${NS}}
stringData: {apiKey: sk-fuzz}
`,
      );
      controller = await startPlainController(cluster);
    });
    after(async () => {
      await controller?.stop();
      await cluster?.stop();
    });

    it('stays up and writes every accepted pool’s status', async (t) => {
      let exited: number | string | undefined;
      void controller.exited.then((code) => (exited = code));
      const docs = fc.sample(poolDocument, { seed: SEED, numRuns: CREATES });
      const patches = fc.sample(fc.array(mutation, { minLength: 1, maxLength: 3 }), {
        seed: SEED + 1,
        numRuns: CREATES,
      });
      const asPool = (doc: Json, name: string): unknown => ({
        apiVersion: 'switchyard.dev/v1alpha1',
        kind: 'InferencePool',
        metadata: { name, namespace: NS },
        spec: (doc as { spec?: unknown } | null)?.spec,
      });
      const accepted: string[] = [];
      const statuses: Record<string, number> = {};
      const count = (status: number): void => {
        statuses[status] = (statuses[status] ?? 0) + 1;
      };
      for (const [i, doc] of docs.entries()) {
        const name = `fuzz-${i}`;
        const created = await cluster.request('POST', POOLS, asPool(doc, name));
        count(created.status);
        if (created.status !== 201) continue;
        accepted.push(name);
        // An update of an accepted pool to another random spec (the API server may refuse it).
        const next = mutate(asPool(doc, name), patches[i]!) as { spec?: unknown };
        const updated = await cluster.request(
          'PATCH',
          `${POOLS}/${name}`,
          [{ op: 'replace', path: '/spec', value: next.spec ?? null }],
          { contentType: 'application/json-patch+json' },
        );
        count(updated.status);
        if (i % 5 === 0) {
          await cluster.request('DELETE', `${POOLS}/${name}`);
          accepted.pop();
        }
      }
      assert.ok(accepted.length >= 20, `only ${accepted.length} pools were accepted`);
      assert.ok((statuses[422] ?? 0) > 0, 'some objects were refused by the API server');

      // Each remaining pool's status is for its latest generation.
      await waitFor(
        'the status of every pool',
        async () => {
          const list = await cluster.request<{ items: Stored[] }>('GET', POOLS);
          const pending = list.body.items.filter(
            (p) => p.status?.observedGeneration !== p.metadata.generation,
          );
          return pending.length === 0;
        },
        { timeoutMs: 60_000, intervalMs: 250 },
      );
      assert.equal(exited, undefined, `the controller exited: ${controller.output().slice(-2000)}`);
      assert.equal((await fetch(`${controller.adminUrl}/healthz`)).status, 200);
      assert.equal(
        (await fetch(`${controller.url}/healthz`)).status,
        200,
        'the stream port serves',
      );
      assert.doesNotMatch(controller.output(), /uncaught|unhandled/i);
      recordFigure(t, {
        fault: 'controller: random InferencePools on a real API server',
        load: `${CREATES} creates and their updates (seed ${SEED}), every fifth deleted`,
        lost: 0,
        requests: Object.values(statuses).reduce((a, b) => a + b, 0),
        apiServerAnswers: statuses,
        poolsLeft: accepted.length,
      });
    });
  },
);
