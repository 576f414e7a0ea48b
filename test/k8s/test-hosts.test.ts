/**
 * Smoke test of the network-namespace test hosts (test/k8s/test-hosts.ts): a `switchyard sim`
 * inside a host on its 10.77.<n>.2:8000 answers /v1/models from the root namespace, traffic is
 * refused to addresses that are not our test hosts', and remove() leaves no namespace, veth or
 * process behind. Needs root and `ip netns`; SWITCHYARD_K8S_TESTS=0 skips it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { assertTestAddress, createTestHost, startSwitchyardIn } from './test-hosts.ts';

const enabled = process.env['SWITCHYARD_K8S_TESTS'] !== '0';

function ip(args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8' });
}

describe('test hosts', { skip: !enabled }, () => {
  it('runs a simulator on its own 10.x address, reachable from the root namespace', async () => {
    const host = await createTestHost('sim-host');
    try {
      assert.match(host.ip, /^10\.77\.\d+\.2$/);
      assert.match(host.name, new RegExp(`^sy-${process.pid}-\\d+$`));
      assert.ok(ip(['netns', 'list']).includes(host.name));
      const inside = await host.exec('ip', ['-o', 'addr', 'show']);
      assert.equal(inside.code, 0, inside.stderr);
      assert.match(inside.stdout, new RegExp(`eth0\\s+inet ${host.ip.replaceAll('.', '\\.')}/30`));
      assert.match(inside.stdout, /lo\s+inet 127\.0\.0\.1\/8/);

      const sim = await startSwitchyardIn(host, ['sim', '--port', '8000', '--name', 'in-netns']);
      assert.equal(sim.url, `http://${host.ip}:8000`);
      assertTestAddress(host.ip);
      const res = await fetch(`http://${host.ip}:8000/v1/models`, {
        signal: AbortSignal.timeout(5_000),
      });
      assert.equal(res.status, 200);
      const body = (await res.json()) as { object: string; data: unknown[] };
      assert.equal(body.object, 'list');
      assert.ok(body.data.length > 0);
      // Not listening on the root namespace's loopback: it is on another "machine".
      const local = await fetch('http://127.0.0.1:8000/v1/models').catch(() => undefined);
      assert.notEqual(local?.headers.get('x-sim-backend'), 'in-netns');
    } finally {
      await host.remove();
    }
    assert.ok(!ip(['netns', 'list']).includes(host.name), 'namespace removed');
    assert.ok(!ip(['-o', 'link', 'show']).includes(`${host.name}:`), 'veth removed');
    assert.throws(() => assertTestAddress(host.ip), /not the address of a test host/);
  });

  it('refuses traffic to addresses that are not its test hosts', () => {
    for (const address of ['10.0.0.1', '10.77.250.2', '192.168.1.1', '8.8.8.8']) {
      assert.throws(() => assertTestAddress(address), /refusing to send traffic/);
    }
  });
});
