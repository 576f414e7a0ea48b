/**
 * What an autoscaling set-up is made of, as a real kube-apiserver takes it (harness/k8s/cluster.ts),
 * one cluster for the file:
 *
 * - the chart's ServiceMonitor and PodMonitor (values serviceMonitor, podMonitor) against the
 *   Prometheus Operator's CRDs, read from its Go module at a pinned version
 *   (harness/k8s/module-crds.ts): created with strict field validation, then by `helm install`;
 *   without those CRDs `helm install` fails naming the kind, as docs/chart.md says;
 * - every Kubernetes object of docs/autoscaling.md, created with strict field validation (dry
 *   run): the pool against switchyard's CRD, the ScaledObject against KEDA's (from its Go module
 *   too), the HorizontalPodAutoscaler against the built-in API; every metric the page names is
 *   one of the controller's autoscaling gauges, and the adapter rule serves every one the HPA asks
 *   for.
 *
 * Nothing scrapes or scales here (no Prometheus, KEDA or kubelet): the objects' shape is what is
 * checked. SWITCHYARD_K8S_TESTS=0 or SWITCHYARD_HELM_TESTS=0 skips it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import {
  startCluster,
  statusMessage,
  type Cluster,
  type K8sObject,
} from '../../harness/k8s/cluster.ts';
import { installInferencePoolCrd } from '../../harness/k8s/crd.ts';
import {
  KEDA,
  PROMETHEUS_OPERATOR,
  installCrdFiles,
  moduleCrdFile,
} from '../../harness/k8s/module-crds.ts';
import { CHART, ROOT, helm, type Helm } from './tools.ts';

const enabled =
  process.env['SWITCHYARD_K8S_TESTS'] !== '0' && process.env['SWITCHYARD_HELM_TESTS'] !== '0';
const NS = 'switchyard-system';
const DOC = join(ROOT, 'docs/autoscaling.md');

/** The controller leader's per-pool gauges (labels namespace, pool), as issue 44 names them. */
const GAUGES = [
  'switchyard_pool_server_requests_waiting',
  'switchyard_pool_server_requests_running',
  'switchyard_pool_server_kv_cache_usage_mean',
  'switchyard_pool_server_kv_cache_usage_max',
  'switchyard_pool_ready_endpoints',
  'switchyard_pool_demand_requests_per_second',
  'switchyard_pool_demand_shed_per_second',
  'switchyard_pool_demand_queued_requests',
  'switchyard_pool_demand_held_requests',
];

/** The ```yaml blocks of a markdown page, parsed. */
function yamlBlocks(markdown: string): unknown[] {
  return [...markdown.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => parse(m[1]!) as unknown);
}

const isObject = (v: unknown): v is K8sObject =>
  typeof v === 'object' && v !== null && 'apiVersion' in v && 'kind' in v;

describe('monitors and autoscaling examples on a real API server', { skip: !enabled }, () => {
  let cluster: Cluster;
  let helmTool: Helm;
  const kubeconfig = (): string[] => ['--kubeconfig', cluster.kubeconfigPath];

  /** Creates `object` with strict field validation (a dry run unless `persist`). */
  const create = async (
    object: K8sObject,
    persist = false,
  ): Promise<{ status: number; message: string }> => {
    const path = await cluster.resourcePath(
      object.apiVersion,
      object.kind,
      object.metadata.namespace,
    );
    const query = `fieldValidation=Strict${persist ? '' : '&dryRun=All'}`;
    const res = await cluster.request('POST', `${path}?${query}`, object);
    return { status: res.status, message: res.status === 201 ? '' : statusMessage(res) };
  };

  const monitors = async (): Promise<K8sObject[]> =>
    parseAllDocuments(
      await helmTool.run([
        'template',
        'switchyard',
        CHART,
        '--namespace',
        NS,
        '--set',
        'serviceMonitor.enabled=true',
        '--set',
        'podMonitor.enabled=true',
        '--set-json',
        'podMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":"switchyard_ttft_seconds_bucket","action":"drop"}]',
        '--show-only',
        'templates/servicemonitor.yaml',
        '--show-only',
        'templates/podmonitor.yaml',
      ]),
    ).map((d) => d.toJS() as K8sObject);

  before(
    async () => {
      [cluster, helmTool] = await Promise.all([startCluster(), helm()]);
      await installInferencePoolCrd(cluster);
      await cluster.applyYaml(
        `apiVersion: v1\nkind: Namespace\nmetadata: {name: ${NS}}\n---\n` +
          'apiVersion: v1\nkind: Namespace\nmetadata: {name: chat}\n',
      );
    },
    { timeout: 30 * 60_000 },
  );
  after(async () => {
    helmTool?.dispose();
    await cluster?.stop();
  });

  it('without the Prometheus Operator CRDs, helm install refuses the monitors, naming the kind', async () => {
    await assert.rejects(
      helmTool.run([
        'install',
        'switchyard',
        CHART,
        '--namespace',
        NS,
        ...kubeconfig(),
        '--set',
        'serviceMonitor.enabled=true',
      ]),
      /no matches for kind "ServiceMonitor" in version "monitoring.coreos.com\/v1"/,
    );
  });

  it('with them, the rendered ServiceMonitor and PodMonitor are valid, and helm install creates them', async () => {
    await installCrdFiles(
      cluster,
      await Promise.all(
        ['servicemonitors', 'podmonitors'].map((plural) =>
          moduleCrdFile(PROMETHEUS_OPERATOR, `monitoring.coreos.com_${plural}.yaml`),
        ),
      ),
    );
    const rendered = await monitors();
    assert.deepEqual(rendered.map((o) => o.kind).sort(), ['PodMonitor', 'ServiceMonitor']);
    for (const monitor of rendered) {
      const res = await create(monitor);
      assert.equal(res.status, 201, `${monitor.kind}: ${res.message}`);
    }
    // Strict validation has teeth: a misspelt field of the endpoint is refused.
    const typo = structuredClone(rendered.find((o) => o.kind === 'ServiceMonitor')!);
    const [endpoint] = (typo['spec'] as { endpoints: Record<string, unknown>[] }).endpoints;
    endpoint!['honourLabels'] = true;
    const refused = await create(typo);
    assert.notEqual(refused.status, 201);
    assert.match(refused.message, /unknown field "spec\.endpoints\[0\]\.honourLabels"/);

    await helmTool.run([
      'install',
      'switchyard',
      CHART,
      '--namespace',
      NS,
      ...kubeconfig(),
      '--set',
      'serviceMonitor.enabled=true',
      '--set',
      'podMonitor.enabled=true',
    ]);
    for (const path of [
      `/apis/monitoring.coreos.com/v1/namespaces/${NS}/servicemonitors/switchyard`,
      `/apis/monitoring.coreos.com/v1/namespaces/${NS}/podmonitors/switchyard-sidecars`,
    ])
      assert.equal((await cluster.request('GET', path)).status, 200, path);
  });

  it("docs/autoscaling.md's pool, ScaledObject and HPA are valid objects", async () => {
    await installCrdFiles(cluster, [await moduleCrdFile(KEDA, 'keda.sh_scaledobjects.yaml')]);
    const objects = yamlBlocks(readFileSync(DOC, 'utf8')).filter(isObject);
    assert.deepEqual(objects.map((o) => o.kind).sort(), [
      'HorizontalPodAutoscaler',
      'InferencePool',
      'ScaledObject',
    ]);
    for (const object of objects) {
      const res = await create(object);
      assert.equal(res.status, 201, `${object.kind} ${object.metadata.name}: ${res.message}`);
    }
    // What the page says of the HPA at zero replicas: Kubernetes 1.37 turned HPAScaleToZero on.
    const hpa = structuredClone(objects.find((o) => o.kind === 'HorizontalPodAutoscaler')!);
    (hpa['spec'] as { minReplicas: number }).minReplicas = 0;
    const [major, minor] = cluster.version.replace(/^v/, '').split('.').map(Number) as [
      number,
      number,
    ];
    const atZero = await create(hpa);
    if (major > 1 || minor >= 37) assert.equal(atZero.status, 201, atZero.message);
    else assert.match(atZero.message, /minReplicas/);
  });

  it('docs/autoscaling.md names only the gauges, and the adapter rule serves what the HPA asks', () => {
    const page = readFileSync(DOC, 'utf8');
    const named = new Set(page.match(/switchyard_pool_\w+/g));
    assert.deepEqual(
      [...named].filter((n) => !GAUGES.includes(n)),
      [],
    );
    // The table lists every gauge.
    for (const gauge of GAUGES) assert.match(page, new RegExp(`^\\| \`${gauge}\` +\\|`, 'm'));
    const blocks = yamlBlocks(page);
    const scaledObject = blocks.filter(isObject).find((o) => o.kind === 'ScaledObject')!;
    const triggers = (scaledObject['spec'] as { triggers: { metadata: { query: string } }[] })
      .triggers;
    for (const { metadata } of triggers)
      assert.match(metadata.query, /^max\(switchyard_pool_\w+\{namespace="chat",pool="chat"\}\)$/);
    const rule = (
      blocks.find((b) => typeof b === 'object' && b !== null && 'externalRules' in b) as {
        externalRules: { seriesQuery: string; metricsQuery: string }[];
      }
    ).externalRules[0]!;
    const names = new RegExp(`^(?:${/__name__=~"([^"]+)"/.exec(rule.seriesQuery)![1]!})$`);
    const hpa = blocks.filter(isObject).find((o) => o.kind === 'HorizontalPodAutoscaler')!;
    const metrics = (
      hpa['spec'] as { metrics: { external: { metric: { name: string } } }[] }
    ).metrics.map((m) => m.external.metric.name);
    assert.ok(metrics.length > 0);
    for (const name of metrics) {
      assert.ok(GAUGES.includes(name), name);
      assert.match(name, names);
    }
    // Across the controller's replicas the gauges are exported by one: max, not sum.
    assert.match(rule.metricsQuery, /^max\(<<\.Series>>\{<<\.LabelMatchers>>\}\) by \(pool\)$/);
  });
});
