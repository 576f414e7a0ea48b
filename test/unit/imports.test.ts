/**
 * The import graph of every TypeScript file in the repository, built with the TypeScript
 * compiler's own import scanner (`ts.preProcessFile`: static, type-only, re-exports and dynamic
 * imports alike), and the rules the layout rests on:
 *
 * - no import cycle, of any length;
 * - nothing outside `test/` imports from `test/` (what tests share with benches and the demo
 *   lives in `harness/`);
 * - `controller/` and `sidecar/` never import each other, not even through a third folder
 *   (their shared contract is `crds/`).
 *
 * A failure names every violation with the chain of files that makes it.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SKIPPED_DIRS = new Set(['node_modules', 'coverage', 'results']);

/**
 * Cycles tolerated for now, each as the set of files in it. A listed cycle may stay until it is
 * removed (then the test asks to drop its entry), but no other file may join it. None today.
 */
const KNOWN_CYCLES: readonly (readonly string[])[] = [];

/** Every .ts file under the repository root, as a path relative to it with `/` separators. */
function projectFiles(dir = ROOT): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith('.') || SKIPPED_DIRS.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...projectFiles(path));
    else if (entry.name.endsWith('.ts')) files.push(relative(ROOT, path).split('\\').join('/'));
  }
  return files;
}

/** file → the project files it imports (relative specifiers only; packages are not ours). */
function importGraph(files: readonly string[]): Map<string, string[]> {
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const info = ts.preProcessFile(readFileSync(join(ROOT, file), 'utf8'), true, true);
    const targets = info.importedFiles
      .map((i) => i.fileName)
      .filter((spec) => spec.startsWith('./') || spec.startsWith('../'))
      .map((spec) =>
        relative(ROOT, resolve(ROOT, dirname(file), spec))
          .split('\\')
          .join('/'),
      )
      .filter((target) => known.has(target));
    graph.set(file, [...new Set(targets)].sort());
  }
  return graph;
}

/** Strongly connected components with more than one file, or a file importing itself (Tarjan). */
function cyclicComponents(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return found;
}

/** The shortest chain of imports from `from` to `to` (through `allowed` files only), or undefined. */
function chain(
  graph: Map<string, string[]>,
  from: string,
  to: (file: string) => boolean,
  allowed: (file: string) => boolean = () => true,
): string[] | undefined {
  const previous = new Map<string, string>();
  const queue = [from];
  const seen = new Set([from]);
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const w of graph.get(v) ?? []) {
      if (to(w)) {
        const path = [w, v];
        for (let p = previous.get(v); p !== undefined; p = previous.get(p)) path.push(p);
        return path.reverse();
      }
      if (seen.has(w) || !allowed(w)) continue;
      seen.add(w);
      previous.set(w, v);
      queue.push(w);
    }
  }
  return undefined;
}

const show = (files: readonly string[]): string => files.join(' → ');

describe('the import graph', () => {
  const graph = importGraph(projectFiles());

  it('covers the project (a sanity check of the scanner)', () => {
    assert.ok(graph.size > 100, `only ${graph.size} files found under ${ROOT}`);
    assert.ok(
      graph.get('cli/main.ts')?.includes('cli/sidecar-command.ts'),
      'cli/main.ts imports cli/sidecar-command.ts',
    );
  });

  it('has no import cycle', () => {
    const key = (files: readonly string[]): string => [...files].sort().join(' ');
    const known = new Set(KNOWN_CYCLES.map(key));
    const problems: string[] = [];
    const seen = new Set<string>();
    for (const component of cyclicComponents(graph)) {
      seen.add(key(component));
      if (known.has(key(component))) continue;
      const inComponent = new Set(component);
      const start = component[0]!;
      const cycle = chain(
        graph,
        start,
        (f) => f === start,
        (f) => inComponent.has(f),
      )!;
      problems.push(
        `import cycle: ${show(cycle)}` +
          (component.length > cycle.length - 1 ? ` (${component.length} files in all)` : ''),
      );
    }
    for (const cycle of KNOWN_CYCLES)
      if (!seen.has(key(cycle)))
        problems.push(`the known cycle ${show(cycle)} is gone: remove it from KNOWN_CYCLES`);
    assert.deepEqual(problems, []);
  });

  it('nothing outside test/ imports from test/', () => {
    const problems: string[] = [];
    for (const [file, targets] of graph) {
      if (file.startsWith('test/')) continue;
      for (const target of targets)
        if (target.startsWith('test/'))
          problems.push(`${show([file, target])}: move what both use to harness/`);
    }
    assert.deepEqual(problems, []);
  });

  it('controller/ and sidecar/ never import each other, not even through another folder', () => {
    const problems = new Set<string>();
    for (const [from, to] of [
      ['controller/', 'sidecar/'],
      ['sidecar/', 'controller/'],
    ] as const) {
      for (const file of graph.keys()) {
        if (!file.startsWith(from)) continue;
        const path = chain(graph, file, (f) => f.startsWith(to));
        if (path === undefined) continue;
        // From the last file of `from` on: one line per way across, however many files use it.
        const last = path.findLastIndex((f) => f.startsWith(from));
        problems.add(show(path.slice(last)));
      }
    }
    assert.deepEqual([...problems], []);
  });
});
