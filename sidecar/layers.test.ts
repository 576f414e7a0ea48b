/**
 * The sidecar is a one-way stack: sidecar.ts (wiring) → admin → proxy → telemetry → config →
 * policy. A layer
 * may import its own and the layers below it, never one above; the shells reach the pure policy
 * core only through its public API, policy/index.ts; and the sidecar never imports the controller.
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const SIDECAR = dirname(fileURLToPath(import.meta.url));
const ROOT = dirname(SIDECAR);

/** Lowest first. */
const LAYERS = ['policy', 'config', 'telemetry', 'proxy', 'admin', 'sidecar'] as const;
type Layer = (typeof LAYERS)[number];

function layerOf(file: string): Layer | undefined {
  const path = relative(SIDECAR, file);
  if (path.startsWith('..')) return undefined;
  const top = path.split('/')[0]!;
  if (top === 'sidecar.ts') return 'sidecar';
  return (LAYERS as readonly string[]).includes(top) ? (top as Layer) : undefined;
}

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => join(e.parentPath, e.name));
}

/** Relative specifiers of static imports, re-exports and dynamic imports. */
function importsOf(text: string): string[] {
  const found: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s*'([^']+)'/g))
    found.push(m[1]!);
  for (const m of text.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g)) found.push(m[1]!);
  return found.filter((s) => s.startsWith('.'));
}

interface Edge {
  from: string;
  to: string;
}

async function edges(): Promise<Edge[]> {
  const result: Edge[] = [];
  for (const file of await sourceFiles(SIDECAR)) {
    for (const spec of importsOf(await readFile(file, 'utf8')))
      result.push({ from: file, to: resolve(dirname(file), spec) });
  }
  return result;
}

const show = (e: Edge): string => `${relative(ROOT, e.from)} → ${relative(ROOT, e.to)}`;

describe('sidecar layers', () => {
  test('the import scan sees the wiring and every layer', async () => {
    const all = await edges();
    const layers = new Set(all.map((e) => layerOf(e.from)));
    for (const layer of LAYERS) assert.ok(layers.has(layer), `no import found in ${layer}`);
  });

  test('no layer imports a layer above it', async () => {
    const upward = (await edges()).filter((e) => {
      const from = layerOf(e.from);
      const to = layerOf(e.to);
      return from !== undefined && to !== undefined && LAYERS.indexOf(to) > LAYERS.indexOf(from);
    });
    assert.deepEqual(upward.map(show), []);
  });

  test('the shells import the policy core through policy/index.ts only', async () => {
    const index = join(SIDECAR, 'policy', 'index.ts');
    const around = (await edges()).filter(
      (e) => layerOf(e.from) !== 'policy' && layerOf(e.to) === 'policy' && e.to !== index,
    );
    assert.deepEqual(around.map(show), []);
  });

  test('the sidecar never imports the controller', async () => {
    const controller = join(ROOT, 'controller');
    const crossing = (await edges()).filter((e) => e.to.startsWith(controller + '/'));
    assert.deepEqual(crossing.map(show), []);
  });
});
