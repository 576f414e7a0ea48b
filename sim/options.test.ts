import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_SIM_OPTIONS,
  SIM_OPTION_SPECS,
  SimOptionError,
  checkSimOptionsPatch,
  parseSimOptionValue,
  resolveSimOptions,
} from './options.ts';

void test('every option has a spec with its default, a kebab-case flag and help', () => {
  assert.deepEqual(
    SIM_OPTION_SPECS.map((s) => s.key).sort(),
    Object.keys(DEFAULT_SIM_OPTIONS).sort(),
  );
  for (const s of SIM_OPTION_SPECS) {
    assert.equal(s.default, DEFAULT_SIM_OPTIONS[s.key]);
    assert.match(s.flag, /^--[a-z]+(-[a-z]+)*$/);
    assert.ok(s.help.length > 0);
    // commander camel-cases the flag into the option key.
    const camel = s.flag.slice(2).replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    assert.equal(camel, s.key);
  }
  assert.equal(SIM_OPTION_SPECS.find((s) => s.key === 'queueLimit')?.flag, '--queue-limit');
});

void test('resolveSimOptions fills defaults and rejects bad values naming the field', () => {
  const o = resolveSimOptions({ slots: 8, model: undefined });
  assert.equal(o.slots, 8);
  assert.equal(o.decodeMsPerToken, 10);
  assert.equal(o.model, undefined);
  assert.throws(
    () => resolveSimOptions({ errorRate: 1.5 }),
    (e: unknown) => e instanceof SimOptionError && e.field === 'errorRate',
  );
  assert.throws(
    () => resolveSimOptions({ slots: 0 }),
    (e: unknown) => e instanceof SimOptionError && e.field === 'slots',
  );
});

void test('checkSimOptionsPatch: runtime patches, null unsets, port and host are fixed', () => {
  assert.deepEqual(checkSimOptionsPatch({ model: null, speed: 5 }, { runtime: true }), {
    ok: true,
    patch: { model: undefined, speed: 5 },
  });
  const bad = checkSimOptionsPatch({ slots: null }, { runtime: true });
  assert.equal(bad.ok, false);
  assert.equal(checkSimOptionsPatch({ port: 1 }, { runtime: false }).ok, true);
  const port = checkSimOptionsPatch({ port: 1 }, { runtime: true });
  assert.ok(!port.ok && port.field === 'port');
  const unknown = checkSimOptionsPatch({ nope: 1 }, { runtime: false });
  assert.ok(!unknown.ok && unknown.field === 'nope');
  assert.equal(checkSimOptionsPatch('x', { runtime: true }).ok, false);
});

void test('parseSimOptionValue parses command-line strings', () => {
  assert.equal(parseSimOptionValue('slots', '12'), 12);
  assert.equal(parseSimOptionValue('errorRate', '0.25'), 0.25);
  assert.equal(parseSimOptionValue('name', 'a'), 'a');
  assert.throws(() => parseSimOptionValue('slots', '1.5'), /slots/);
  assert.throws(() => parseSimOptionValue('speed', '0'), /speed/);
  assert.throws(() => parseSimOptionValue('port', ''), /port/);
});

void test('tlsCert and tlsKey go together and are fixed at start', () => {
  assert.throws(
    () => resolveSimOptions({ tlsCert: 'cert.pem' }),
    (err: unknown) => err instanceof SimOptionError && err.field === 'tlsKey',
  );
  assert.throws(
    () => resolveSimOptions({ tlsKey: 'key.pem' }),
    (err: unknown) => err instanceof SimOptionError && err.field === 'tlsCert',
  );
  assert.equal(resolveSimOptions({ tlsCert: 'c', tlsKey: 'k' }).tlsCert, 'c');
  const patch = checkSimOptionsPatch({ tlsCert: 'c' }, { runtime: true });
  assert.ok(!patch.ok);
});
