import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { DEFAULT_BATCH, tracingSettings, type TracingSettings } from './otel-env.ts';

const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };

function on(settings: TracingSettings): Extract<TracingSettings, { kind: 'on' }> {
  assert.equal(settings.kind, 'on', JSON.stringify(settings));
  return settings;
}

describe('tracingSettings', () => {
  test('is off when no OTLP endpoint is configured, even with other OTEL_ variables', () => {
    const settings = tracingSettings({ OTEL_SERVICE_NAME: 'chat' }, 'switchyard-sidecar');
    assert.equal(settings.kind, 'off');
  });

  test('is off when an endpoint is set but empty', () => {
    assert.equal(tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }, 's').kind, 'off');
  });

  test('is off when the SDK is disabled or the traces exporter is none', () => {
    assert.deepEqual(tracingSettings({ ...ENDPOINT, OTEL_SDK_DISABLED: 'TRUE' }, 's'), {
      kind: 'off',
      reason: 'OTEL_SDK_DISABLED=true',
    });
    assert.equal(tracingSettings({ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'none' }, 's').kind, 'off');
    assert.equal(on(tracingSettings({ ...ENDPOINT, OTEL_SDK_DISABLED: 'false' }, 's')).kind, 'on');
  });

  test('is off, saying why, for gRPC or an endpoint that is not an http(s) URL', () => {
    const grpc = tracingSettings({ ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 's');
    assert.equal(grpc.kind, 'off');
    assert.match(grpc.kind === 'off' ? grpc.reason : '', /grpc is not supported/);
    const bad = tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, 's');
    assert.equal(bad.kind, 'off');
  });

  test('appends /v1/traces to the generic endpoint, once', () => {
    assert.equal(on(tracingSettings(ENDPOINT, 's')).tracesUrl, 'http://collector:4318/v1/traces');
    const slash = { OTEL_EXPORTER_OTLP_ENDPOINT: 'https://c.example/otlp/' };
    assert.equal(on(tracingSettings(slash, 's')).tracesUrl, 'https://c.example/otlp/v1/traces');
  });

  test('takes the traces endpoint as it is, ahead of the generic one', () => {
    const env = { ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://traces:9999/custom' };
    assert.equal(on(tracingSettings(env, 's')).tracesUrl, 'http://traces:9999/custom');
  });

  test('names the service from OTEL_SERVICE_NAME, else the default given', () => {
    assert.equal(
      on(tracingSettings(ENDPOINT, 'switchyard-sidecar')).serviceName,
      'switchyard-sidecar',
    );
    const named = { ...ENDPOINT, OTEL_SERVICE_NAME: 'chat-app-sidecar' };
    assert.equal(on(tracingSettings(named, 'switchyard-sidecar')).serviceName, 'chat-app-sidecar');
  });

  test('samples parent-based, always on, by default', () => {
    const settings = on(tracingSettings(ENDPOINT, 's'));
    assert.deepEqual(settings.sampler, { parentBased: true, root: { kind: 'always_on' } });
    assert.deepEqual(settings.warnings, []);
  });

  test('reads every sampler the spec names but the remote ones', () => {
    const cases: [string, string | undefined, unknown][] = [
      ['always_on', undefined, { parentBased: false, root: { kind: 'always_on' } }],
      ['always_off', undefined, { parentBased: false, root: { kind: 'always_off' } }],
      ['traceidratio', '0.25', { parentBased: false, root: { kind: 'ratio', ratio: 0.25 } }],
      ['traceidratio', undefined, { parentBased: false, root: { kind: 'ratio', ratio: 1 } }],
      ['parentbased_always_on', undefined, { parentBased: true, root: { kind: 'always_on' } }],
      ['parentbased_always_off', undefined, { parentBased: true, root: { kind: 'always_off' } }],
      [
        'PARENTBASED_TRACEIDRATIO',
        '0.01',
        { parentBased: true, root: { kind: 'ratio', ratio: 0.01 } },
      ],
    ];
    for (const [name, arg, expected] of cases) {
      const env = { ...ENDPOINT, OTEL_TRACES_SAMPLER: name, OTEL_TRACES_SAMPLER_ARG: arg };
      assert.deepEqual(on(tracingSettings(env, 's')).sampler, expected, name);
    }
  });

  test('warns and falls back on a sampler or ratio it cannot honour', () => {
    const unknown = on(tracingSettings({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'jaeger_remote' }, 's'));
    assert.deepEqual(unknown.sampler, { parentBased: true, root: { kind: 'always_on' } });
    assert.match(unknown.warnings.join(), /jaeger_remote is not supported/);
    for (const arg of ['1.5', '-0.1', 'half']) {
      const env = {
        ...ENDPOINT,
        OTEL_TRACES_SAMPLER: 'traceidratio',
        OTEL_TRACES_SAMPLER_ARG: arg,
      };
      const settings = on(tracingSettings(env, 's'));
      assert.deepEqual(settings.sampler.root, { kind: 'ratio', ratio: 1 }, arg);
      assert.match(settings.warnings.join(), /not a ratio/);
    }
  });

  test('warns that another exporter or protocol is served as OTLP over http/json', () => {
    const env = {
      ...ENDPOINT,
      OTEL_TRACES_EXPORTER: 'zipkin',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
    };
    const warnings = on(tracingSettings(env, 's')).warnings.join('\n');
    assert.match(warnings, /zipkin is not supported/);
    assert.match(warnings, /http\/protobuf/);
    const json = {
      ...ENDPOINT,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_TRACES_EXPORTER: 'otlp',
    };
    assert.deepEqual(on(tracingSettings(json, 's')).warnings, []);
  });

  test('reads the batch processor variables, with the spec defaults', () => {
    assert.deepEqual(on(tracingSettings(ENDPOINT, 's')).batch, DEFAULT_BATCH);
    const env = {
      ...ENDPOINT,
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_BSP_MAX_QUEUE_SIZE: '64',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '128',
      OTEL_BSP_EXPORT_TIMEOUT: '2000',
    };
    assert.deepEqual(on(tracingSettings(env, 's')).batch, {
      scheduledDelayMs: 100,
      maxQueueSize: 64,
      maxExportBatchSize: 64, // never more than the queue holds
      exportTimeoutMs: 2000,
    });
    const bad = on(tracingSettings({ ...ENDPOINT, OTEL_BSP_SCHEDULE_DELAY: '0.5' }, 's'));
    assert.equal(bad.batch.scheduledDelayMs, DEFAULT_BATCH.scheduledDelayMs);
    assert.match(bad.warnings.join(), /OTEL_BSP_SCHEDULE_DELAY=0.5 is not a positive integer/);
  });
});
