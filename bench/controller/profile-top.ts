/**
 * The functions a V8 CPU profile (`--cpu-prof`) spent the most time in, by self time, and the
 * files: `node bench/controller/profile-top.ts <file.cpuprofile>... [--top N]`. Several files are
 * added up (the hosts of one run). For reading `npm run bench:controller-fleet -- --cpu-prof`.
 */
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args[topAt + 1]) : 25;
const files = args.filter((a, i) => a !== '--top' && i !== topAt + 1);
if (files.length === 0) {
  process.stderr.write(
    'usage: node bench/controller/profile-top.ts <file.cpuprofile>... [--top N]\n',
  );
  process.exit(2);
}

const byFunction = new Map<string, number>();
const byFile = new Map<string, number>();
let totalUs = 0;
for (const file of files) {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    const frame = nodes.get(id)?.callFrame;
    if (frame === undefined) return;
    const where = frame.url === '' ? '(native)' : basename(frame.url);
    const name = `${frame.functionName || '(anonymous)'} ${where}:${frame.lineNumber + 1}`;
    byFunction.set(name, (byFunction.get(name) ?? 0) + us);
    byFile.set(where, (byFile.get(where) ?? 0) + us);
    totalUs += us;
  });
}
const print = (title: string, map: Map<string, number>): void => {
  process.stdout.write(`${title} (of ${(totalUs / 1e6).toFixed(1)} s sampled)\n`);
  for (const [name, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top))
    process.stdout.write(
      `  ${((us / totalUs) * 100).toFixed(1).padStart(5)} %  ${(us / 1e6).toFixed(2).padStart(7)} s  ${name}\n`,
    );
};
print('self time by function', byFunction);
print('self time by file', byFile);
