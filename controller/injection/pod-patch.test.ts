import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fastJsonPatch from 'fast-json-patch';
import fc from 'fast-check';
import { parseInjectionConfig, type InjectionConfig } from './config.ts';
import {
  CA_BUNDLE_ANNOTATION,
  INJECTED_ANNOTATION,
  OPENAI_BASE_URL_ANNOTATION,
  POOL_LABEL,
  POOLS_ANNOTATION,
  MODEL_DISCOVERY_ANNOTATION,
  PRIORITY_ANNOTATION,
  SIDECAR_NAME,
  SKIPPED_ANNOTATION,
  decideInjection,
  type InjectionDecision,
  type PodLike,
} from './pod-patch.ts';

const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

function config(extra: Record<string, unknown> = {}): InjectionConfig {
  const result = parseInjectionConfig({
    controllerUrl: 'https://switchyard.switchyard-system.svc:8443',
    image: 'registry.example/switchyard:0.1.0',
    excludeNamespaces: ['kube-system'],
    ...extra,
  });
  if (!result.ok) throw new Error(result.errors.join('; '));
  return result.config;
}

function pod(
  extra: { labels?: Record<string, string>; annotations?: Record<string, string> } = {},
) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: 'app-',
      labels: { app: 'chat', [POOL_LABEL]: 'chat', ...extra.labels },
      ...(extra.annotations === undefined ? {} : { annotations: extra.annotations }),
    },
    spec: {
      containers: [
        { name: 'app', image: 'app:1', ports: [{ containerPort: 3000 }] },
        { name: 'worker', image: 'app:1', env: [{ name: 'MODE', value: 'worker' }] },
      ],
    },
  };
}

type Pod = ReturnType<typeof pod> & {
  metadata: { annotations?: Record<string, string> };
  spec: {
    initContainers?: ({ name: string } & Record<string, unknown>)[];
    volumes?: ({ name: string } & Record<string, unknown>)[];
    containers: { name: string; env?: { name: string; value?: string }[] }[];
  };
};

const decide = (p: PodLike, c = config(), namespace = 'apps'): InjectionDecision =>
  decideInjection({ pod: p, namespace, config: c, caBundle: CA, poolExists: () => true });

/** Applies the decision's patch the way the API server does (RFC 6902, validated). */
function apply<T>(p: T, decision: InjectionDecision): T {
  if (decision.kind !== 'injected' && decision.kind !== 'skipped') return p;
  const ops = decision.patch as fastJsonPatch.Operation[];
  assert.equal(fastJsonPatch.validate(ops, structuredClone(p)), undefined);
  return fastJsonPatch.applyPatch(structuredClone(p), ops).newDocument;
}

describe('decideInjection', () => {
  it('adds the native sidecar first among init containers, with its volumes and annotations', () => {
    const decision = decide(pod());
    assert.equal(decision.kind, 'injected');
    const out = apply(pod(), decision) as Pod;
    const sidecar = out.spec.initContainers?.[0] as Record<string, unknown>;
    assert.equal(sidecar['name'], SIDECAR_NAME);
    assert.equal(sidecar['restartPolicy'], 'Always');
    assert.equal(sidecar['image'], 'registry.example/switchyard:0.1.0');
    assert.deepEqual(sidecar['args'], [
      'sidecar',
      '--controller',
      'https://switchyard.switchyard-system.svc:8443',
      '--pool',
      'chat',
      '--token-file',
      '/var/run/secrets/switchyard/token',
      '--ca-file',
      '/var/run/secrets/switchyard/ca.crt',
      '--cache-file',
      '/var/cache/switchyard/snapshot.json',
      '--listen',
      '127.0.0.1:8080',
      '--admin',
      '0.0.0.0:9090',
      '--log-level',
      'info',
    ]);
    assert.deepEqual(sidecar['securityContext'], {
      runAsNonRoot: true,
      runAsUser: 65532,
      runAsGroup: 65532,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    // No 2 MiB young-generation cap: it saved ~4 MB idle but starved bursts (docs/image.md#memory).
    assert.equal(
      (sidecar['env'] as { name: string }[]).some((e) => e.name === 'NODE_OPTIONS'),
      false,
    );
    assert.deepEqual(sidecar['startupProbe'], {
      httpGet: { path: '/startupz', port: 9090 },
      periodSeconds: 1,
      failureThreshold: 60,
    });
    assert.deepEqual((sidecar['readinessProbe'] as { httpGet: unknown }).httpGet, {
      path: '/readyz',
      port: 9090,
    });
    assert.equal(out.metadata.annotations?.[INJECTED_ANNOTATION], 'true');
    assert.equal(out.metadata.annotations?.[CA_BUNDLE_ANNOTATION], CA);
    const token = out.spec.volumes?.find((v) => v['name'] === 'switchyard-token') as unknown as {
      projected: { sources: Record<string, unknown>[] };
    };
    assert.deepEqual(token.projected.sources[0], {
      serviceAccountToken: { audience: 'switchyard', expirationSeconds: 3600, path: 'token' },
    });
    assert.deepEqual(token.projected.sources[1], {
      downwardAPI: {
        items: [
          {
            path: 'ca.crt',
            fieldRef: { fieldPath: "metadata.annotations['switchyard.dev/ca-bundle']" },
          },
        ],
      },
    });
    assert.ok(out.spec.volumes?.some((v) => v['name'] === 'switchyard-cache'));
  });

  it('sets OPENAI_BASE_URL in every app container, keeping their other variables', () => {
    const out = apply(pod(), decide(pod())) as Pod;
    assert.deepEqual(out.spec.containers[0]?.env, [
      { name: 'OPENAI_BASE_URL', value: 'http://127.0.0.1:8080/v1' },
    ]);
    assert.deepEqual(out.spec.containers[1]?.env, [
      { name: 'MODE', value: 'worker' },
      { name: 'OPENAI_BASE_URL', value: 'http://127.0.0.1:8080/v1' },
    ]);
  });

  it('leaves a container’s own OPENAI_BASE_URL alone', () => {
    const p = pod();
    p.spec.containers[1]!.env = [{ name: 'OPENAI_BASE_URL', value: 'https://api.example/v1' }];
    const out = apply(p, decide(p)) as Pod;
    assert.deepEqual(out.spec.containers[1]?.env, [
      { name: 'OPENAI_BASE_URL', value: 'https://api.example/v1' },
    ]);
  });

  it('sets no OPENAI_BASE_URL when the pod opts out by annotation, or the config says so', () => {
    const optedOut = pod({ annotations: { [OPENAI_BASE_URL_ANNOTATION]: 'false' } });
    const out = apply(optedOut, decide(optedOut)) as Pod;
    assert.equal(out.spec.containers[0]?.env, undefined);
    assert.equal(out.spec.initContainers?.[0]?.['name'], SIDECAR_NAME);
    const off = apply(pod(), decide(pod(), config({ setOpenaiBaseUrl: false }))) as Pod;
    assert.equal(off.spec.containers[0]?.env, undefined);
  });

  it('is idempotent: injecting the injected pod changes nothing', () => {
    const once = apply(pod(), decide(pod()));
    assert.deepEqual(decide(once), { kind: 'unchanged' });
  });

  it('on a re-invocation, gives OPENAI_BASE_URL to a container another webhook added', () => {
    const once = apply(pod(), decide(pod())) as Pod;
    once.spec.containers.push({ name: 'late' });
    const again = decide(once);
    assert.equal(again.kind, 'injected');
    const twice = apply(once, again);
    assert.equal(twice.spec.initContainers?.filter((c) => c['name'] === SIDECAR_NAME).length, 1);
    assert.deepEqual(twice.spec.containers[2]?.env, [
      { name: 'OPENAI_BASE_URL', value: 'http://127.0.0.1:8080/v1' },
    ]);
  });

  it('keeps existing init containers and volumes after the sidecar', () => {
    const p = {
      ...pod(),
      spec: {
        ...pod().spec,
        initContainers: [{ name: 'migrate', image: 'app:1' }],
        volumes: [{ name: 'data', emptyDir: {} }],
      },
    };
    const out = apply(p, decide(p)) as Pod;
    assert.deepEqual(
      out.spec.initContainers?.map((c) => c['name']),
      [SIDECAR_NAME, 'migrate'],
    );
    assert.deepEqual(
      out.spec.volumes?.map((v) => v['name']),
      ['data', 'switchyard-token', 'switchyard-cache'],
    );
  });

  it('escapes annotation keys in JSON pointers', () => {
    const p = pod({ annotations: { 'example.com/x': 'y' } });
    const out = apply(p, decide(p)) as Pod;
    assert.equal(out.metadata.annotations?.['example.com/x'], 'y');
    assert.equal(out.metadata.annotations?.[INJECTED_ANNOTATION], 'true');
  });

  it('ignores pods without the label and pods in excluded namespaces', () => {
    const unlabelled = { metadata: { labels: { app: 'x' } }, spec: { containers: [] } };
    assert.equal(decide(unlabelled).kind, 'ignored');
    assert.equal(decide(pod(), config(), 'kube-system').kind, 'ignored');
  });

  for (const [what, change, reason] of [
    [
      'the pool label is not a valid name',
      (p: Pod) => (p.metadata.labels[POOL_LABEL] = 'Chat_Pool'),
      /is not a valid InferencePool name/,
    ],
    [
      'the pod uses the host network',
      (p: Pod) => Object.assign(p.spec, { hostNetwork: true }),
      /hostNetwork/,
    ],
    [
      'an app container uses the proxy port',
      (p: Pod) =>
        (p.spec.containers[0] = { name: 'app', ports: [{ containerPort: 8080 }] } as never),
      /container app uses port 8080/,
    ],
    [
      'a volume has the sidecar’s volume name',
      (p: Pod) => Object.assign(p.spec, { volumes: [{ name: 'switchyard-cache' }] }),
      /volume named switchyard-cache/,
    ],
  ] as const) {
    it(`skips, annotates and warns when ${what}`, () => {
      const p = pod() as Pod;
      change(p);
      const decision = decide(p);
      assert.equal(decision.kind, 'skipped');
      if (decision.kind !== 'skipped') return;
      assert.match(decision.reason, reason);
      assert.match(decision.warnings[0] ?? '', /^switchyard: sidecar not injected: /);
      const out = apply(p, decision);
      assert.equal(out.metadata.annotations?.[SKIPPED_ANNOTATION], decision.reason);
      assert.equal(out.spec.initContainers, undefined);
    });
  }

  it('warns, but injects, when the pool does not exist yet', () => {
    const decision = decideInjection({
      pod: pod(),
      namespace: 'apps',
      config: config(),
      caBundle: CA,
      poolExists: () => false,
    });
    assert.equal(decision.kind, 'injected');
    assert.match(
      decision.kind === 'injected' ? (decision.warnings[0] ?? '') : '',
      /InferencePool apps\/chat does not exist yet/,
    );
  });

  it('follows the pools of the annotation after the label’s, each with its own --pool', () => {
    const p = pod({ annotations: { [POOLS_ANNOTATION]: 'embed, chat,rerank' } });
    const decision = decideInjection({
      pod: p,
      namespace: 'apps',
      config: config(),
      caBundle: CA,
      poolExists: (name) => name !== 'rerank',
    });
    assert.equal(decision.kind, 'injected');
    const sidecar = (apply(p, decision) as Pod).spec.initContainers?.[0] as unknown as {
      args: string[];
    };
    const pools = sidecar.args.flatMap((arg, i) => (arg === '--pool' ? [sidecar.args[i + 1]] : []));
    assert.deepEqual(pools, ['chat', 'embed', 'rerank']);
    assert.deepEqual(decision.kind === 'injected' ? decision.warnings : [], [
      'switchyard: InferencePool apps/rerank does not exist yet; the sidecar answers 503 for its models until it does',
    ]);
  });

  it('passes the model-discovery annotation on as --model-discovery; a bad value warns', () => {
    const args = (annotations: Record<string, string>) => {
      const p = pod({ annotations });
      const decision = decide(p);
      const sidecar = (apply(p, decision) as Pod).spec.initContainers?.[0] as unknown as {
        args: string[];
      };
      return {
        args: sidecar.args,
        warnings: decision.kind === 'injected' ? decision.warnings : [],
      };
    };
    assert.ok(!args({}).args.includes('--model-discovery'), 'auto is the sidecar default');
    const on = args({ [MODEL_DISCOVERY_ANNOTATION]: 'on' }).args;
    assert.equal(on[on.indexOf('--model-discovery') + 1], 'on');
    const bad = args({ [MODEL_DISCOVERY_ANNOTATION]: 'yes' });
    assert.ok(!bad.args.includes('--model-discovery'));
    assert.match(bad.warnings.join('\n'), /model-discovery is "yes"; it must be auto, on or off/);
  });

  it('passes the priority annotation on as --priority; a bad value warns', () => {
    const args = (annotations: Record<string, string>) => {
      const p = pod({ annotations });
      const decision = decide(p);
      const sidecar = (apply(p, decision) as Pod).spec.initContainers?.[0] as unknown as {
        args: string[];
      };
      return {
        args: sidecar.args,
        warnings: decision.kind === 'injected' ? decision.warnings : [],
      };
    };
    assert.ok(!args({}).args.includes('--priority'), "the pool's default without it");
    const high = args({ [PRIORITY_ANNOTATION]: '10' }).args;
    assert.equal(high[high.indexOf('--priority') + 1], '10');
    const sheddable = args({ [PRIORITY_ANNOTATION]: '-1' }).args;
    assert.equal(sheddable[sheddable.indexOf('--priority') + 1], '-1');
    for (const value of ['high', '1.5', '99999999']) {
      const bad = args({ [PRIORITY_ANNOTATION]: value });
      assert.ok(!bad.args.includes('--priority'), value);
      assert.match(
        bad.warnings.join('\n'),
        /switchyard.dev\/priority is ".*"; it must be an integer from -1000000 to 1000000/,
      );
    }
  });

  it('skips a pod whose annotation names an invalid pool, and says which', () => {
    const p = pod({ annotations: { [POOLS_ANNOTATION]: 'embed,Bad_Name' } });
    const decision = decide(p);
    assert.equal(decision.kind, 'skipped');
    assert.match(
      decision.kind === 'skipped' ? decision.reason : '',
      /annotation switchyard.dev\/pools names "Bad_Name", which is not a valid InferencePool name/,
    );
  });

  it('uses the configured ports, log level, token lifetime and resources', () => {
    const c = config({
      proxyPort: 18080,
      adminPort: 19090,
      logLevel: 'debug',
      tokenExpirationSeconds: 7200,
      resources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '256Mi' } },
    });
    const out = apply(pod(), decide(pod(), c)) as Pod;
    const sidecar = out.spec.initContainers?.[0] as unknown as {
      args: string[];
      resources: unknown;
    };
    assert.ok(sidecar.args.includes('127.0.0.1:18080'));
    assert.ok(sidecar.args.includes('0.0.0.0:19090'));
    assert.ok(sidecar.args.includes('debug'));
    assert.deepEqual(sidecar.resources, {
      requests: { cpu: '50m', memory: '64Mi' },
      limits: { memory: '256Mi' },
    });
    assert.equal(out.spec.containers[0]?.env?.[0]?.value, 'http://127.0.0.1:18080/v1');
  });

  it('gives the sidecar the OTEL_* variables of a tracing configuration, and none without', () => {
    type EnvVar = { name: string; value?: string };
    const sidecarEnv = (c: InjectionConfig): EnvVar[] =>
      (apply(pod(), decide(pod(), c)) as Pod).spec.initContainers?.[0]?.['env'] as EnvVar[];
    assert.deepEqual(
      sidecarEnv(config()).map((e) => e.name),
      ['POD_NAME', 'POD_NAMESPACE'],
    );
    const resource = {
      name: 'OTEL_RESOURCE_ATTRIBUTES',
      value: 'k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)',
    };
    const endpoint = 'http://otel-collector.observability:4318';
    assert.deepEqual(sidecarEnv(config({ tracing: { otlpEndpoint: endpoint } })).slice(2), [
      { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: endpoint },
      { name: 'OTEL_SERVICE_NAME', value: 'switchyard-sidecar' },
      { name: 'OTEL_TRACES_SAMPLER', value: 'parentbased_always_on' },
      resource,
    ]);
    const sampled = config({
      tracing: {
        otlpEndpoint: endpoint,
        serviceName: 'chat-sidecar',
        sampler: 'parentbased_traceidratio',
        samplerArg: '0.05',
      },
    });
    assert.deepEqual(sidecarEnv(sampled).slice(2), [
      { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: endpoint },
      { name: 'OTEL_SERVICE_NAME', value: 'chat-sidecar' },
      { name: 'OTEL_TRACES_SAMPLER', value: 'parentbased_traceidratio' },
      { name: 'OTEL_TRACES_SAMPLER_ARG', value: '0.05' },
      resource,
    ]);
    const bad = parseInjectionConfig({
      controllerUrl: 'https://c:8443',
      image: 'i',
      tracing: { otlpEndpoint: 'collector:4318' },
    });
    assert.equal(bad.ok, false);
  });

  it('never throws, and its patch always applies, on arbitrary pod shapes', () => {
    const container = fc.record(
      {
        name: fc.constantFrom('app', 'side', SIDECAR_NAME, 'x'),
        env: fc.array(fc.record({ name: fc.constantFrom('A', 'OPENAI_BASE_URL') })),
        ports: fc.array(fc.record({ containerPort: fc.constantFrom(80, 8080, 9090, 3000) })),
      },
      { requiredKeys: ['name'] },
    );
    const arbitraryPod = fc.record(
      {
        metadata: fc.record(
          {
            labels: fc.dictionary(
              fc.constantFrom(POOL_LABEL, 'app'),
              fc.constantFrom('chat', 'A_B', ''),
            ),
            annotations: fc.dictionary(
              fc.constantFrom(INJECTED_ANNOTATION, OPENAI_BASE_URL_ANNOTATION, 'a/b~c'),
              fc.constantFrom('true', 'false'),
            ),
          },
          { requiredKeys: [] },
        ),
        spec: fc.record(
          {
            hostNetwork: fc.boolean(),
            containers: fc.array(container, { maxLength: 3 }),
            initContainers: fc.array(container, { maxLength: 2 }),
            volumes: fc.array(fc.record({ name: fc.constantFrom('data', 'switchyard-token') })),
          },
          { requiredKeys: [] },
        ),
      },
      { requiredKeys: ['metadata'] },
    );
    fc.assert(
      fc.property(arbitraryPod, (p) => {
        const decision = decide(p);
        const once = apply(p, decision);
        if (decision.kind === 'injected') {
          // A second pass over the result adds nothing more.
          assert.deepEqual(decide(once), { kind: 'unchanged' });
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe('parseInjectionConfig', () => {
  it('fills the defaults', () => {
    const c = config();
    assert.equal(c.proxyPort, 8080);
    assert.equal(c.adminPort, 9090);
    assert.equal(c.imagePullPolicy, 'IfNotPresent');
    assert.equal(c.tokenExpirationSeconds, 3600);
    assert.equal(c.setOpenaiBaseUrl, true);
  });

  it('names every bad field', () => {
    const result = parseInjectionConfig({
      controllerUrl: 'not a url',
      proxyPort: 0,
      tokenExpirationSeconds: 60,
      imagePullPolicy: 'Sometimes',
      typo: 1,
      probes: { startup: { periodSeconds: 0 }, readiness: {}, liveness: {} },
    });
    assert.equal(result.ok, false);
    const errors = result.ok ? [] : result.errors;
    for (const field of [
      'controllerUrl',
      'image: is required',
      'proxyPort',
      'tokenExpirationSeconds',
      'imagePullPolicy',
      'typo: unknown field',
      'probes.startup.periodSeconds',
    ])
      assert.ok(
        errors.some((e) => e.startsWith(field)),
        `${field} in ${errors.join(' | ')}`,
      );
  });

  it('refuses what is not a mapping', () => {
    assert.deepEqual(parseInjectionConfig([]), {
      ok: false,
      errors: ['<root>: must be a mapping of settings'],
    });
  });
});
