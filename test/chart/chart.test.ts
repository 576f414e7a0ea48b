/**
 * The Helm chart in charts/switchyard:
 *
 * - without helm: the chart's CRD is a byte-identical copy of the generated one, and
 *   values.schema.json describes every key of values.yaml;
 * - with helm (built by scripts/helm/build.sh): `helm lint`, `helm template` renders the expected
 *   kinds with a securityContext that meets the `restricted` Pod Security Standard, and fails
 *   without tls.existingSecret;
 * - on a real API server (harness/k8s/cluster.ts): `helm install` into a namespace that enforces
 *   `restricted` creates the CRD, RBAC and the Deployment, and the Deployment's pod template,
 *   created as a bare Pod there, is admitted by PodSecurity. Nothing runs (no kubelet).
 *
 * SWITCHYARD_HELM_TESTS=0 skips everything that needs helm; SWITCHYARD_K8S_TESTS=0 skips the
 * API server part.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { parseInjectionConfig } from '../../controller/injection/config.ts';
import { POOL_LABEL, sidecarContainer } from '../../controller/injection/pod-patch.ts';
import {
  startCluster,
  statusMessage,
  type Cluster,
  type K8sObject,
} from '../../harness/k8s/cluster.ts';
import { IMAGE_JEMALLOC, JEMALLOC_CONF } from '../../harness/allocator.ts';
import { CHART, ROOT, helm, type Helm } from './tools.ts';

const GENERATED_CRD = join(ROOT, 'crds/switchyard.dev_inferencepools.yaml');
const CHART_CRD = join(CHART, 'crds/switchyard.dev_inferencepools.yaml');

const helmEnabled = process.env['SWITCHYARD_HELM_TESTS'] !== '0';
const k8sEnabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';

const TLS_SECRET = 'switchyard-tls';
/** Bring-your-own certificate: the mode the PodSecurity check also covers the TLS volume in. */
const SECRET_MODE = ['--set', 'tls.mode=Secret', '--set', `tls.existingSecret=${TLS_SECRET}`];

// ---------------------------------------------------------------------------------------------
// Without helm
// ---------------------------------------------------------------------------------------------

interface Schema {
  type?: string | string[];
  properties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  $ref?: string;
  definitions?: Record<string, Schema>;
}

/** Resolves a local `#/definitions/x` reference (the only kind values.schema.json uses). */
function resolve(root: Schema, schema: Schema): Schema {
  if (schema.$ref === undefined) return schema;
  const name = schema.$ref.replace(/^#\/definitions\//, '');
  const target = root.definitions?.[name];
  assert.ok(target !== undefined, `values.schema.json: unresolved $ref ${schema.$ref}`);
  return { ...resolve(root, target), ...schema, $ref: undefined };
}

/** The paths of values.yaml that the schema does not describe. */
function undescribed(root: Schema, schema: Schema, value: unknown, path: string): string[] {
  const s = resolve(root, schema);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [];
  const missing: string[] = [];
  for (const [key, child] of Object.entries(value as Record<string, unknown>)) {
    const childPath = path === '' ? key : `${path}.${key}`;
    const described =
      s.properties?.[key] ??
      (typeof s.additionalProperties === 'object' ? s.additionalProperties : undefined);
    if (described === undefined) missing.push(childPath);
    else missing.push(...undescribed(root, described, child, childPath));
  }
  return missing;
}

describe('chart files', () => {
  it('ships a byte-identical copy of the generated InferencePool CRD', () => {
    assert.ok(
      readFileSync(CHART_CRD).equals(readFileSync(GENERATED_CRD)),
      'charts/switchyard/crds/switchyard.dev_inferencepools.yaml differs from ' +
        'crds/switchyard.dev_inferencepools.yaml: run `npm run generate`, then ' +
        '`cp crds/switchyard.dev_inferencepools.yaml charts/switchyard/crds/`',
    );
  });

  it('values.schema.json describes every key of values.yaml', () => {
    const schema = JSON.parse(readFileSync(join(CHART, 'values.schema.json'), 'utf8')) as Schema;
    const values: unknown = parse(readFileSync(join(CHART, 'values.yaml'), 'utf8'));
    assert.deepEqual(undescribed(schema, schema, values, ''), []);
  });

  it('docs/chart.md has a row for every key of values.yaml', () => {
    const docs = readFileSync(join(ROOT, 'docs/chart.md'), 'utf8');
    const values: unknown = parse(readFileSync(join(CHART, 'values.yaml'), 'utf8'));
    /** A key is documented by its own row, or by rows for all its children. */
    const missing = (value: unknown, path: string): string[] => {
      if (path !== '' && docs.includes(`| \`${path}\``)) return [];
      const isMap = value !== null && typeof value === 'object' && !Array.isArray(value);
      if (!isMap || Object.keys(value).length === 0) return [path];
      return Object.entries(value).flatMap(([k, v]) =>
        missing(v, path === '' ? k : `${path}.${k}`),
      );
    };
    assert.deepEqual(missing(values, ''), []);
  });

  it('Chart.yaml: apiVersion v2, appVersion is the package version', () => {
    const chart = parse(readFileSync(join(CHART, 'Chart.yaml'), 'utf8')) as Record<string, unknown>;
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
      version: string;
    };
    assert.equal(chart['apiVersion'], 'v2');
    assert.equal(chart['name'], 'switchyard');
    assert.equal(String(chart['appVersion']), pkg.version);
  });
});

// ---------------------------------------------------------------------------------------------
// With helm
// ---------------------------------------------------------------------------------------------

type Obj = K8sObject & { spec?: Record<string, unknown> };

interface Container {
  name: string;
  args?: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
  securityContext?: Record<string, unknown>;
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}

interface PodSpec {
  securityContext?: Record<string, unknown>;
  containers: Container[];
  volumes?: { name: string; secret?: { secretName: string } }[];
  serviceAccountName?: string;
}

interface Deployment extends K8sObject {
  spec: { template: { metadata: Record<string, unknown>; spec: PodSpec } };
}

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

describe('helm chart', { skip: !helmEnabled, timeout: 40 * 60_000 }, () => {
  let helmTool: Helm | undefined;
  const helmRun = (args: string[]): Promise<string> => helmTool!.run(args);
  const template = async (args: string[] = []): Promise<Obj[]> => {
    const text = await helmRun(['template', 'switchyard', CHART, '--namespace', 'sy', ...args]);
    return parseAllDocuments(text)
      .map((doc) => doc.toJS() as Obj | null)
      .filter((o): o is Obj => o !== null);
  };
  const one = <T extends Obj>(objects: Obj[], kind: string): T => {
    const found = objects.filter((o) => o.kind === kind);
    assert.equal(found.length, 1, `one ${kind} in ${objects.map((o) => o.kind).join(', ')}`);
    return found[0] as T;
  };

  before(
    async () => {
      helmTool = await helm();
    },
    { timeout: 30 * 60_000 },
  );
  after(() => helmTool?.dispose());

  it('is a helm v3 binary', async () => {
    assert.match(await helmRun(['version', '--short']), /^v3\.\d+\.\d+/);
  });

  it('passes helm lint (strict) in every TLS mode', async () => {
    await helmRun(['lint', '--strict', CHART]);
    await helmRun(['lint', '--strict', CHART, ...SECRET_MODE]);
    await helmRun(['lint', '--strict', CHART, '--set', 'tls.mode=CertManager']);
  });

  it('refuses contradictory TLS values with a message that says what to set', async () => {
    await assert.rejects(
      template(['--set', 'tls.mode=Secret']),
      /tls\.existingSecret is required with tls\.mode Secret/,
    );
    await assert.rejects(
      template(['--set', `tls.existingSecret=${TLS_SECRET}`]),
      /tls\.existingSecret is only used with tls\.mode Secret \(tls\.mode is SelfManaged\)/,
    );
  });

  it('rejects values the schema does not allow', async () => {
    await assert.rejects(template(['--set', 'controller.replicass=3']), /replicass/);
    await assert.rejects(template(['--set', 'service.ports.stream=0']), /stream/);
    await assert.rejects(template(['--set', 'tls.mode=Manual']), /mode/);
    await assert.rejects(template(['--set', 'injection.failurePolicy=Sometimes']), /failurePolicy/);
    await assert.rejects(
      template(['--set', 'sidecar.tokenExpirationSeconds=60']),
      /tokenExpiration/,
    );
  });

  it('renders the expected kinds (and the optional ones only when enabled)', async () => {
    const kinds = (objects: Obj[]): string[] => objects.map((o) => o.kind).sort();
    const base = [
      'ClusterRole',
      'ClusterRoleBinding',
      'ConfigMap',
      'Deployment',
      'MutatingWebhookConfiguration',
      'PodDisruptionBudget',
      'Role',
      'Role',
      'RoleBinding',
      'RoleBinding',
      'Service',
      'ServiceAccount',
    ];
    assert.deepEqual(kinds(await template()), base);
    const all = await template([
      '--set',
      'serviceMonitor.enabled=true',
      '--set',
      'podMonitor.enabled=true',
      '--set',
      'networkPolicy.enabled=true',
      '--set',
      'podDisruptionBudget.enabled=false',
    ]);
    assert.deepEqual(
      kinds(all),
      [
        ...base.filter((k) => k !== 'PodDisruptionBudget'),
        'NetworkPolicy',
        'PodMonitor',
        'ServiceMonitor',
      ].sort(),
    );
    assert.equal(one(all, 'ServiceMonitor').apiVersion, 'monitoring.coreos.com/v1');
    assert.equal(one(all, 'PodMonitor').apiVersion, 'monitoring.coreos.com/v1');
    // No self-managed TLS: no Role for its Secret. No injection: no webhook, no ConfigMap.
    assert.deepEqual(
      kinds(await template([...SECRET_MODE, '--set', 'injection.enabled=false'])),
      base.filter(
        (k, i) =>
          k !== 'ConfigMap' &&
          k !== 'MutatingWebhookConfiguration' &&
          !(k === 'Role' && base.indexOf(k) !== i) &&
          !(k === 'RoleBinding' && base.indexOf(k) !== i),
      ),
    );
    // CRDs live in crds/: installed by helm install, not rendered by helm template.
    assert.ok(!kinds(await template()).includes('CustomResourceDefinition'));
    const withCrds = await template(['--include-crds']);
    assert.equal(
      one(withCrds, 'CustomResourceDefinition').metadata.name,
      'inferencepools.switchyard.dev',
    );
  });

  it('CertManager mode: a self-signed CA, its Issuer and the serving Certificate, or your issuer', async () => {
    const objects = await template(['--set', 'tls.mode=CertManager']);
    const named = (kind: string): string[] =>
      objects.filter((o) => o.kind === kind).map((o) => o.metadata.name);
    assert.deepEqual(named('Issuer'), ['switchyard-selfsigned', 'switchyard-ca']);
    assert.deepEqual(named('Certificate'), ['switchyard-ca', 'switchyard-tls']);
    const serving = objects.find(
      (o) => o.kind === 'Certificate' && o.metadata.name === 'switchyard-tls',
    )!;
    assert.deepEqual(serving.spec?.['dnsNames'], [
      'switchyard',
      'switchyard.sy',
      'switchyard.sy.svc',
      'switchyard.sy.svc.cluster.local',
    ]);
    assert.equal(serving.spec?.['secretName'], TLS_SECRET);
    const own = await template([
      '--set',
      'tls.mode=CertManager',
      '--set-json',
      'tls.certManager.issuerRef={"name":"corp-ca","kind":"ClusterIssuer","group":"cert-manager.io"}',
    ]);
    assert.deepEqual(
      own.filter((o) => o.kind === 'Issuer' || o.kind === 'Certificate').map((o) => o.kind),
      ['Certificate'],
    );
    const deployment = one<Deployment>(own, 'Deployment');
    const args = deployment.spec.template.spec.containers[0]?.args ?? [];
    assert.ok(args.includes('--tls-cert-file') && args.includes('/tls/ca.crt'));
  });

  it('the injection ConfigMap is a configuration the controller accepts', async () => {
    const objects = await template([
      '--set',
      'sidecar.ports.proxy=18080',
      '--set',
      'image.repository=registry.example/switchyard',
    ]);
    const configMap = one<Obj & { data: Record<string, string> }>(objects, 'ConfigMap');
    const parsed = parseInjectionConfig(JSON.parse(configMap.data['injection.json'] ?? ''));
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.errors.join('; '));
    assert.equal(parsed.config.controllerUrl, 'https://switchyard.sy.svc:8443');
    assert.equal(parsed.config.image, 'registry.example/switchyard:0.1.0');
    assert.equal(parsed.config.proxyPort, 18080);
    assert.deepEqual(parsed.config.excludeNamespaces, [
      'kube-system',
      'kube-public',
      'kube-node-lease',
      'sy',
    ]);
    // The controller rolls when the configuration changes.
    const deployment = one<Deployment>(objects, 'Deployment');
    const annotations = deployment.spec.template.metadata['annotations'] as Record<string, string>;
    assert.match(annotations['checksum/injection-config'] ?? '', /^[0-9a-f]{64}$/);
  });

  it('tracing values reach the controller’s environment and the injected sidecars’ configuration', async () => {
    const objects = await template([
      '--set',
      'tracing.otlpEndpoint=http://otel-collector.observability:4318',
      '--set',
      'tracing.sampler=parentbased_traceidratio',
      '--set-string',
      'tracing.samplerArg=0.05',
    ]);
    const configMap = one<Obj & { data: Record<string, string> }>(objects, 'ConfigMap');
    const parsed = parseInjectionConfig(JSON.parse(configMap.data['injection.json'] ?? ''));
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.errors.join('; '));
    assert.deepEqual(parsed.config.tracing, {
      otlpEndpoint: 'http://otel-collector.observability:4318',
      serviceName: 'switchyard-sidecar',
      sampler: 'parentbased_traceidratio',
      samplerArg: '0.05',
    });
    const deployment = one<Deployment>(objects, 'Deployment');
    const env = JSON.stringify(deployment.spec.template);
    for (const name of [
      'OTEL_EXPORTER_OTLP_ENDPOINT',
      'OTEL_SERVICE_NAME',
      'OTEL_TRACES_SAMPLER',
      'OTEL_TRACES_SAMPLER_ARG',
    ])
      assert.ok(env.includes(`"${name}"`), name);
    assert.ok(env.includes('"switchyard-controller"'));

    const off = await template([]);
    const offConfig = one<Obj & { data: Record<string, string> }>(off, 'ConfigMap');
    assert.equal(
      (JSON.parse(offConfig.data['injection.json'] ?? '{}') as Obj)['tracing'],
      undefined,
    );
    assert.ok(!JSON.stringify(one<Deployment>(off, 'Deployment')).includes('OTEL_'));
  });

  it("the monitors scrape the controller's metrics port and the injected sidecars' admin port", async () => {
    const objects = await template([
      '--set',
      'serviceMonitor.enabled=true',
      '--set',
      'podMonitor.enabled=true',
      '--set',
      'sidecar.ports.admin=19090',
    ]);
    const service = one<Obj>(objects, 'Service');
    const serviceMonitor = one<Obj>(objects, 'ServiceMonitor');
    const [endpoint] = serviceMonitor.spec?.['endpoints'] as Record<string, unknown>[];
    const ports = service.spec?.['ports'] as { name: string }[];
    assert.ok(ports.some((p) => p.name === endpoint?.['port']));
    // The per-pool gauges keep their own namespace label (the pool's, not the release's).
    assert.equal(endpoint?.['honorLabels'], true);
    const podMonitor = one<Obj>(objects, 'PodMonitor');
    assert.deepEqual(podMonitor.spec?.['selector'], {
      matchExpressions: [{ key: POOL_LABEL, operator: 'Exists' }],
    });
    assert.deepEqual(podMonitor.spec?.['namespaceSelector'], { any: true });
    // Its port is the one the webhook gives the sidecar, on the configured number.
    const configMap = one<Obj & { data: Record<string, string> }>(objects, 'ConfigMap');
    const parsed = parseInjectionConfig(JSON.parse(configMap.data['injection.json'] ?? ''));
    assert.ok(parsed.ok);
    const sidecar = sidecarContainer(parsed.config, ['chat']) as {
      ports: { name: string; containerPort: number }[];
    };
    const [podEndpoint] = podMonitor.spec?.['podMetricsEndpoints'] as Record<string, unknown>[];
    assert.deepEqual(
      sidecar.ports.find((p) => p.name === podEndpoint?.['port']),
      { name: podEndpoint?.['port'], containerPort: 19090, protocol: 'TCP' },
    );
    const narrowed = one<Obj>(
      await template([
        '--set',
        'podMonitor.enabled=true',
        '--set-json',
        'podMonitor.namespaces=["chat","apps"]',
        '--set-json',
        'podMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":"switchyard_ttft_seconds_bucket","action":"drop"}]',
      ]),
      'PodMonitor',
    );
    assert.deepEqual(narrowed.spec?.['namespaceSelector'], { matchNames: ['chat', 'apps'] });
    const [narrowedEndpoint] = narrowed.spec?.['podMetricsEndpoints'] as Record<string, unknown>[];
    assert.deepEqual(narrowedEndpoint?.['metricRelabelings'], [
      { sourceLabels: ['__name__'], regex: 'switchyard_ttft_seconds_bucket', action: 'drop' },
    ]);
  });

  it('the webhook: by Service, no caBundle (the controller keeps it), labelled pods only', async () => {
    const webhook = one<Obj & { webhooks: Record<string, unknown>[] }>(
      await template(),
      'MutatingWebhookConfiguration',
    );
    assert.equal(webhook.webhooks.length, 1);
    const [w] = webhook.webhooks;
    assert.deepEqual(w?.['clientConfig'], {
      service: { name: 'switchyard', namespace: 'sy', port: 8443, path: '/mutate/pods' },
    });
    assert.equal(w?.['failurePolicy'], 'Ignore');
    assert.equal(w?.['reinvocationPolicy'], 'IfNeeded');
    assert.equal(w?.['sideEffects'], 'None');
    assert.deepEqual(w?.['objectSelector'], {
      matchExpressions: [{ key: 'switchyard.dev/pool', operator: 'Exists' }],
    });
    assert.deepEqual(w?.['namespaceSelector'], {
      matchExpressions: [
        {
          key: 'kubernetes.io/metadata.name',
          operator: 'NotIn',
          values: ['kube-system', 'kube-public', 'kube-node-lease', 'sy'],
        },
      ],
    });
  });

  it('the Deployment runs the controller as the restricted Pod Security Standard requires', async () => {
    const objects = await template(SECRET_MODE);
    const deployment = one<Deployment>(objects, 'Deployment');
    assert.equal(deployment.spec['replicas' as never], 2);
    const pod = deployment.spec.template.spec;
    assert.equal(pod.securityContext?.['runAsNonRoot'], true);
    assert.deepEqual(pod.securityContext?.['seccompProfile'], { type: 'RuntimeDefault' });
    assert.equal(pod.containers.length, 1);
    const [c] = pod.containers;
    assert.ok(c !== undefined);
    assert.deepEqual(c.securityContext, {
      runAsNonRoot: true,
      runAsUser: 65532,
      runAsGroup: 65532,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    assert.deepEqual(c.args, [
      'controller',
      '--listen',
      '0.0.0.0:8443',
      '--admin',
      '0.0.0.0:9091',
      '--tls-cert-file',
      '/tls/tls.crt',
      '--tls-key-file',
      '/tls/tls.key',
      '--tls-ca-file',
      '/tls/ca.crt',
      '--injection-config',
      '/etc/switchyard/injection.json',
      '--webhook-config-name',
      'switchyard',
      '--lease-namespace',
      'sy',
      '--lease-name',
      'switchyard-controller',
      '--identity',
      '$(POD_NAME)',
      '--pod-uid',
      '$(POD_UID)',
      '--heartbeat',
      '10s',
      '--load-scrape-every',
      '100ms',
      '--placement-bytes-per-second',
      '8192',
      '--advertise-address',
      '$(POD_IP)',
      '--token-review-cache',
      '30m',
      '--log-level',
      'info',
    ]);
    assert.deepEqual(
      c.env?.map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath ?? e.value]),
      [
        ['POD_NAME', 'metadata.name'],
        ['POD_NAMESPACE', 'metadata.namespace'],
        ['POD_UID', 'metadata.uid'],
        ['POD_IP', 'status.podIP'],
        // jemalloc, as the benchmarks measure it (harness/allocator.ts), at the image's path.
        ['LD_PRELOAD', IMAGE_JEMALLOC],
        ['MALLOC_CONF', JEMALLOC_CONF],
      ],
    );
    assert.deepEqual(c.livenessProbe?.httpGet, { path: '/healthz', port: 'metrics' });
    assert.deepEqual(c.readinessProbe?.httpGet, { path: '/readyz', port: 'metrics' });
    assert.deepEqual(
      c.volumeMounts?.find((m) => m.name === 'tls'),
      { name: 'tls', mountPath: '/tls', readOnly: true },
    );
    assert.equal(pod.volumes?.find((v) => v.name === 'tls')?.secret?.secretName, TLS_SECRET);

    const service = one<Obj>(objects, 'Service');
    assert.deepEqual(
      (service.spec?.['ports'] as { name: string; port: number }[]).map((p) => [p.name, p.port]),
      [
        ['stream', 8443],
        ['metrics', 9091],
      ],
    );
    assert.equal(one<Obj>(objects, 'PodDisruptionBudget').spec?.['minAvailable'], 1);
  });

  it('controller.allocator glibc preloads nothing', async () => {
    const objects = await template([...SECRET_MODE, '--set', 'controller.allocator=glibc']);
    const [c] = one<Deployment>(objects, 'Deployment').spec.template.spec.containers;
    assert.deepEqual(
      c?.env?.map((e) => e.name),
      ['POD_NAME', 'POD_NAMESPACE', 'POD_UID', 'POD_IP'],
    );
  });

  it('SelfManaged (the default): the controller gets its Secret and names, and mounts no TLS volume', async () => {
    const deployment = one<Deployment>(await template(), 'Deployment');
    const pod = deployment.spec.template.spec;
    const args = pod.containers[0]?.args ?? [];
    const after = (flag: string): string | undefined => args[args.indexOf(flag) + 1];
    assert.equal(after('--tls-secret'), TLS_SECRET);
    assert.equal(
      after('--tls-san'),
      'switchyard,switchyard.sy,switchyard.sy.svc,switchyard.sy.svc.cluster.local',
    );
    assert.ok(!args.includes('--tls-cert-file'));
    assert.equal(
      pod.volumes?.find((v) => v.name === 'tls'),
      undefined,
    );
  });

  it('grants least privilege: exactly the verbs the controller uses', async () => {
    const objects = await template();
    const rules = (o: Obj): string[] =>
      ((o as unknown as { rules: (Rule & { resourceNames?: string[] })[] }).rules ?? []).flatMap(
        (r) =>
          r.apiGroups.flatMap((g) =>
            r.resources.flatMap((res) =>
              r.verbs.map(
                (v) =>
                  `${g || 'core'}/${res}${r.resourceNames === undefined ? '' : `[${r.resourceNames.join()}]`}:${v}`,
              ),
            ),
          ),
      );
    assert.deepEqual(rules(one(objects, 'ClusterRole')).sort(), [
      'admissionregistration.k8s.io/mutatingwebhookconfigurations[switchyard]:get',
      'admissionregistration.k8s.io/mutatingwebhookconfigurations[switchyard]:patch',
      'authentication.k8s.io/tokenreviews:create',
      'core/events:create',
      'core/pods:get',
      'core/pods:list',
      'core/pods:watch',
      'core/secrets:get',
      'core/secrets:list',
      'core/secrets:watch',
      'core/serviceaccounts:list',
      'core/serviceaccounts:watch',
      'core/services:list',
      'core/services:watch',
      'discovery.k8s.io/endpointslices:list',
      'discovery.k8s.io/endpointslices:watch',
      'inference.networking.k8s.io/inferencepools:list',
      'inference.networking.k8s.io/inferencepools:watch',
      'switchyard.dev/inferencepools/status:patch',
      'switchyard.dev/inferencepools:list',
      'switchyard.dev/inferencepools:watch',
    ]);
    const role = (name: string): Obj => {
      const found = objects.find((o) => o.kind === 'Role' && o.metadata.name === name);
      assert.ok(found !== undefined, `Role ${name}`);
      assert.equal(found.metadata.namespace, 'sy');
      return found;
    };
    assert.deepEqual(rules(role('switchyard-leader-election')).sort(), [
      'coordination.k8s.io/leases:create',
      'coordination.k8s.io/leases:get',
      'coordination.k8s.io/leases:list',
      'coordination.k8s.io/leases:update',
    ]);
    assert.deepEqual(rules(role('switchyard-tls')).sort(), [
      'core/secrets:create',
      'core/secrets[switchyard-tls]:get',
      'core/secrets[switchyard-tls]:update',
    ]);
    // Without injection, no webhook configuration; pods are still read (the pod a sidecar's
    // token is bound to, and the member pods of a referenced GAIE pool).
    const plain = rules(one(await template(['--set', 'injection.enabled=false']), 'ClusterRole'));
    assert.deepEqual(
      plain.filter((r) => r.includes('pods') || r.includes('webhook')),
      ['core/pods:get', 'core/pods:list', 'core/pods:watch'],
    );
  });

  describe('on a real API server', { skip: !k8sEnabled }, () => {
    const NS = 'switchyard-system';
    let cluster: Cluster;

    before(
      async () => {
        cluster = await startCluster();
      },
      { timeout: 30 * 60_000 },
    );
    after(async () => {
      await cluster?.stop();
    });

    it('helm install into a namespace enforcing `restricted`', async () => {
      await cluster.applyYaml(
        [
          'apiVersion: v1',
          'kind: Namespace',
          'metadata:',
          `  name: ${NS}`,
          '  labels:',
          '    pod-security.kubernetes.io/enforce: restricted',
          '    pod-security.kubernetes.io/enforce-version: latest',
        ].join('\n'),
      );

      const out = await helmRun([
        'install',
        'switchyard',
        CHART,
        '--namespace',
        NS,
        '--kubeconfig',
        cluster.kubeconfigPath,
        // Validated by the API server too (a ServiceMonitor would need the Prometheus CRDs).
        '--set',
        'networkPolicy.enabled=true',
        '--set-json',
        'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"team":"monitoring"}}}]',
      ]);
      assert.match(out, /STATUS: deployed/);
      assert.match(out, /kubectl get ipool/);

      const get = async (path: string): Promise<void> => {
        const res = await cluster.request('GET', path);
        assert.equal(res.status, 200, `GET ${path}: ${res.text}`);
      };
      await get(
        '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/inferencepools.switchyard.dev',
      );
      await get(`/apis/apps/v1/namespaces/${NS}/deployments/switchyard`);
      await get(`/api/v1/namespaces/${NS}/services/switchyard`);
      await get(`/api/v1/namespaces/${NS}/serviceaccounts/switchyard`);
      await get(`/apis/policy/v1/namespaces/${NS}/poddisruptionbudgets/switchyard`);
      await get(`/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies/switchyard`);
      await get(`/api/v1/namespaces/${NS}/configmaps/switchyard-injection`);
      await get('/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/switchyard');
      await get(`/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}/roles/switchyard-tls`);
      await get('/apis/rbac.authorization.k8s.io/v1/clusterroles/switchyard');
      await get('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/switchyard');
      await get(
        `/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}/roles/switchyard-leader-election`,
      );
      await get(
        `/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}/rolebindings/switchyard-leader-election`,
      );
    });

    it("PodSecurity admits the Deployment's pod template as a bare Pod, and refuses one that allows privilege escalation", async () => {
      const objects = await template(['--namespace', NS, ...SECRET_MODE]);
      const deployment = one<Deployment>(objects, 'Deployment');
      const pod = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { ...deployment.spec.template.metadata, name: 'switchyard-template' },
        spec: deployment.spec.template.spec,
      };
      const path = `/api/v1/namespaces/${NS}/pods`;
      const accepted = await cluster.request('POST', path, pod);
      assert.equal(
        accepted.status,
        201,
        `the restricted namespace rejected the pod: ${accepted.text}`,
      );

      // The check has teeth: the same pod without the restrictions is refused.
      const loose = structuredClone(pod);
      loose.metadata.name = 'switchyard-loose';
      for (const c of loose.spec.containers) {
        c.securityContext = { ...c.securityContext, allowPrivilegeEscalation: true };
      }
      const rejected = await cluster.request('POST', path, loose);
      assert.equal(rejected.status, 403, rejected.text);
      assert.match(
        statusMessage(rejected),
        /violates PodSecurity "restricted:latest".*allowPrivilegeEscalation/,
      );
    });

    it('the ServiceAccount may do what the controller does, and no more', async () => {
      const can = async (attributes: Record<string, string>): Promise<boolean> => {
        const res = await cluster.request<{ status: { allowed: boolean } }>(
          'POST',
          '/apis/authorization.k8s.io/v1/subjectaccessreviews',
          {
            apiVersion: 'authorization.k8s.io/v1',
            kind: 'SubjectAccessReview',
            spec: {
              user: `system:serviceaccount:${NS}:switchyard`,
              groups: ['system:serviceaccounts', `system:serviceaccounts:${NS}`],
              resourceAttributes: attributes,
            },
          },
        );
        assert.equal(res.status, 201, res.text);
        return res.body.status.allowed;
      };
      const pools = { group: 'switchyard.dev', resource: 'inferencepools' };
      assert.equal(await can({ ...pools, verb: 'watch', namespace: 'apps' }), true);
      assert.equal(
        await can({ ...pools, verb: 'patch', subresource: 'status', namespace: 'apps' }),
        true,
      );
      assert.equal(await can({ ...pools, verb: 'update', namespace: 'apps' }), false);
      assert.equal(await can({ resource: 'secrets', verb: 'list', namespace: 'apps' }), true);
      assert.equal(await can({ resource: 'secrets', verb: 'create', namespace: 'apps' }), false);
      const leases = { group: 'coordination.k8s.io', resource: 'leases' };
      assert.equal(await can({ ...leases, verb: 'update', namespace: NS }), true);
      assert.equal(await can({ ...leases, verb: 'update', namespace: 'apps' }), false);
      assert.equal(await can({ ...leases, verb: 'delete', namespace: NS }), false);
      assert.equal(
        await can({ group: 'authentication.k8s.io', resource: 'tokenreviews', verb: 'create' }),
        true,
      );
      // Injection: watch pods, keep its own webhook's caBundle; nothing else of either.
      assert.equal(await can({ resource: 'pods', verb: 'watch' }), true);
      assert.equal(await can({ resource: 'pods', verb: 'create', namespace: 'apps' }), false);
      assert.equal(await can({ resource: 'pods', verb: 'patch', namespace: 'apps' }), false);
      const webhooks = {
        group: 'admissionregistration.k8s.io',
        resource: 'mutatingwebhookconfigurations',
      };
      assert.equal(await can({ ...webhooks, verb: 'patch', name: 'switchyard' }), true);
      assert.equal(await can({ ...webhooks, verb: 'patch', name: 'someone-else' }), false);
      assert.equal(await can({ ...webhooks, verb: 'create' }), false);
      // Self-managed TLS: create Secrets in the release namespace, update only its own.
      assert.equal(await can({ resource: 'secrets', verb: 'create', namespace: NS }), true);
      assert.equal(
        await can({ resource: 'secrets', verb: 'update', namespace: NS, name: TLS_SECRET }),
        true,
      );
      assert.equal(
        await can({ resource: 'secrets', verb: 'update', namespace: NS, name: 'other' }),
        false,
      );
      assert.equal(
        await can({ resource: 'secrets', verb: 'delete', namespace: NS, name: TLS_SECRET }),
        false,
      );
    });

    it('helm uninstall removes the release but keeps the CRD', async () => {
      await helmRun([
        'uninstall',
        'switchyard',
        '--namespace',
        NS,
        '--kubeconfig',
        cluster.kubeconfigPath,
      ]);
      const deployment = await cluster.request(
        'GET',
        `/apis/apps/v1/namespaces/${NS}/deployments/switchyard`,
      );
      assert.equal(deployment.status, 404);
      const webhook = await cluster.request(
        'GET',
        '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/switchyard',
      );
      assert.equal(webhook.status, 404, 'no webhook left behind to intercept pods');
      const crd = await cluster.request(
        'GET',
        '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/inferencepools.switchyard.dev',
      );
      assert.equal(crd.status, 200);
    });
  });
});
