import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  LEASE_DURATION_MS,
  planControllerOptions,
  type ControllerFiles,
  type ControllerFlags,
  type ControllerPlan,
} from './controller-options.ts';
import { advertisedUrl } from './core/advertised-url.ts';

const flags = (over: Partial<ControllerFlags> = {}): ControllerFlags => ({
  listen: { host: '0.0.0.0', port: 8443 },
  admin: { host: '0.0.0.0', port: 9091 },
  tlsSan: [],
  heartbeat: 10_000,
  loadScrapeEvery: 100,
  tokenReviewCache: 300_000,
  leaseNamespace: 'switchyard-system',
  leaseName: 'switchyard-controller',
  identity: 'switchyard-0',
  ...over,
});
const files = (over: Partial<ControllerFiles> = {}): ControllerFiles => ({
  serviceAccountToken: undefined,
  ...over,
});
const problem = (plan: ControllerPlan): string => (plan.ok ? '' : plan.problem);
const CERT = { tlsCertFile: '/tls/tls.crt', tlsKeyFile: '/tls/tls.key' };
const INJECTION = JSON.stringify({
  image: 'registry.example.com/switchyard:1',
  controllerUrl: 'https://sy.svc:8443',
});

describe('planControllerOptions', () => {
  test('certificate files: the options startController takes, with the lease and status timing', () => {
    const plan = planControllerOptions(flags({ ...CERT, tlsCaFile: '/tls/ca.crt' }), files());
    assert.ok(plan.ok);
    assert.deepEqual(plan.options.tls, {
      kind: 'files',
      files: { certFile: '/tls/tls.crt', keyFile: '/tls/tls.key', caFile: '/tls/ca.crt' },
    });
    assert.equal(plan.options.injection, undefined);
    assert.equal(plan.options.lease.durationMs, LEASE_DURATION_MS);
    assert.equal(plan.options.lease.identity, 'switchyard-0');
    assert.equal(plan.options.loadScrapeEveryMs, 100);
    assert.equal(plan.options.tokenReviewCacheMs, 300_000);
    assert.deepEqual(plan.options.owners, { release: [], replica: [] });
    assert.equal(plan.notes.length, 2, 'no pod UID and no token: both said');
  });

  test('--token-review-cache: between a minute and an hour, naming the flag', () => {
    for (const tokenReviewCache of [59_999, 3_600_001, Number.NaN])
      assert.match(
        problem(planControllerOptions(flags({ ...CERT, tokenReviewCache }), files())),
        /^--token-review-cache must be between 1m and 1h/,
      );
    const hour = planControllerOptions(flags({ ...CERT, tokenReviewCache: 3_600_000 }), files());
    assert.equal(hour.ok && hour.options.tokenReviewCacheMs, 3_600_000);
  });

  test('self-managed TLS in the lease namespace unless told otherwise; it needs names', () => {
    const managed = planControllerOptions(
      flags({ tlsSecret: 'switchyard-tls', tlsSan: ['sy.svc'] }),
      files(),
    );
    assert.deepEqual(managed.ok && managed.options.tls, {
      kind: 'self-managed',
      namespace: 'switchyard-system',
      secretName: 'switchyard-tls',
      names: ['sy.svc'],
    });
    const elsewhere = planControllerOptions(
      flags({ tlsSecret: 'tls', tlsSecretNamespace: 'certs', tlsSan: ['x'] }),
      files(),
    );
    assert.equal(
      elsewhere.ok &&
        elsewhere.options.tls?.kind === 'self-managed' &&
        elsewhere.options.tls.namespace,
      'certs',
    );
    assert.match(
      problem(planControllerOptions(flags({ tlsSecret: 'tls' }), files())),
      /--tls-secret needs --tls-san/,
    );
    assert.match(
      problem(planControllerOptions(flags({ tlsSecret: 'tls', tlsSan: ['x'], ...CERT }), files())),
      /either --tls-secret .* not both/,
    );
  });

  test('no TLS is refused unless --insecure-http says it is a test', () => {
    assert.match(problem(planControllerOptions(flags(), files())), /carries tokens and API keys/);
    assert.match(
      problem(planControllerOptions(flags({ tlsCertFile: '/tls/tls.crt' }), files())),
      /both --tls-cert-file and --tls-key-file/,
    );
    const insecure = planControllerOptions(flags({ insecureHttp: true }), files());
    assert.equal(insecure.ok && insecure.options.tls, undefined);
  });

  test('a load scrape period under the minimum, and a missing kubeconfig, come first', () => {
    assert.match(
      problem(
        planControllerOptions(
          flags({ loadScrapeEvery: 10 }),
          files({ kubeconfigMissing: 'no kubeconfig' }),
        ),
      ),
      /--load-scrape-every must be 0 \(off\) or at least 25ms/,
    );
    assert.equal(
      problem(planControllerOptions(flags(), files({ kubeconfigMissing: 'no kubeconfig: x' }))),
      'no kubeconfig: x',
    );
  });

  test('injection: its configuration read, parsed and checked, naming the file', () => {
    const withConfig = (
      text: ControllerFiles['injectionConfig'],
      over: Partial<ControllerFlags> = {},
    ) =>
      planControllerOptions(
        flags({ ...CERT, injectionConfig: '/etc/inj.json', ...over }),
        files({ injectionConfig: text }),
      );
    const ok = withConfig({ ok: true, text: INJECTION }, { webhookConfigName: 'switchyard' });
    assert.ok(ok.ok, problem(ok));
    assert.equal(ok.options.injection?.webhookConfigName, 'switchyard');
    assert.match(
      problem(withConfig({ ok: false, message: 'ENOENT' })),
      /cannot read --injection-config: ENOENT/,
    );
    assert.match(problem(withConfig(undefined)), /cannot read --injection-config: not read/);
    assert.match(
      problem(withConfig({ ok: true, text: '{"image": [' })),
      /\/etc\/inj.json is not YAML or JSON/,
    );
    assert.match(
      problem(withConfig({ ok: true, text: '{"image": 3}' })),
      /\/etc\/inj.json is invalid:\n {2}/,
    );
    assert.match(
      problem(planControllerOptions(flags({ insecureHttp: true, injectionConfig: '/x' }), files())),
      /needs TLS: the API server calls webhooks over HTTPS only/,
    );
    assert.match(
      problem(planControllerOptions(flags({ ...CERT, webhookConfigName: 'x' }), files())),
      /--webhook-config-name needs --injection-config/,
    );
  });

  test("owners: the replica's pod when its UID is given", () => {
    const plan = planControllerOptions(flags({ ...CERT, podUid: 'uid-1' }), files());
    assert.deepEqual(plan.ok && plan.options.owners?.replica, [
      { apiVersion: 'v1', kind: 'Pod', name: 'switchyard-0', uid: 'uid-1' },
    ]);
  });

  test('advertise address: checked, and the URL the other replicas relay placements to', () => {
    assert.match(
      problem(planControllerOptions(flags({ ...CERT, advertiseAddress: '$(POD_IP)' }), files())),
      /--advertise-address \$\(POD_IP\): give the IP address/,
    );
    const plan = planControllerOptions(flags({ ...CERT, advertiseAddress: '10.1.2.3' }), files());
    assert.ok(plan.ok);
    assert.equal(plan.options.advertiseAddress, '10.1.2.3');
    assert.equal(advertisedUrl('https://0.0.0.0:8443', '10.1.2.3'), 'https://10.1.2.3:8443');
    assert.equal(advertisedUrl('https://[::]:8443', 'fd00::7'), 'https://[fd00::7]:8443');
    assert.equal(advertisedUrl('http://127.0.0.1:4021', undefined), 'http://127.0.0.1:4021');
    assert.equal(advertisedUrl('https://0.0.0.0:8443', undefined), undefined);
    assert.equal(advertisedUrl('https://[::]:8443', ''), undefined);
  });

  test('placements: 8192 bytes a second by default, 0 turns them off, too little is refused', () => {
    const at = (n?: number): ControllerPlan =>
      planControllerOptions(flags({ ...CERT, placementBytesPerSecond: n }), files());
    const plan = at();
    assert.ok(plan.ok);
    assert.equal(plan.options.placementBytesPerSecond, 8192);
    const off = at(0);
    assert.ok(off.ok);
    assert.equal(off.options.placementBytesPerSecond, 0);
    assert.match(
      problem(at(500)),
      /--placement-bytes-per-second 500: give 0 \(off\) or a whole number/,
    );
    assert.match(problem(at(2500.5)), /--placement-bytes-per-second/);
  });
});
