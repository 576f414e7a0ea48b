/**
 * Summary of the controller's V8 CPU profile (`node --cpu-prof`) for `npm run bench:controller
 * -- --profile`: busy time by area, top functions by self time, and switchyard / dependency
 * functions by inclusive time, over a window of the run (V8's profile clock is CLOCK_MONOTONIC
 * in µs, as `process.hrtime`).
 */
import { readFileSync } from 'node:fs';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface FunctionTime {
  function: string;
  area: string;
  ms: number;
  /** % of the busy (non-idle) time in the window. */
  pct: number;
}

export interface ProfileSummary {
  file: string;
  window: string;
  totalMs: number;
  busyMs: number;
  areas: { area: string; ms: number; pct: number }[];
  topSelf: FunctionTime[];
  topInclusive: FunctionTime[];
}

function fileOf(url: string, root: string): string {
  if (url === '') return '';
  let path = url.startsWith('file://') ? decodeURIComponent(url.slice(7)) : url;
  if (path.startsWith(root)) path = path.slice(root.length);
  return path;
}

function areaOf(name: string, file: string): string {
  if (file === '') {
    if (name === '(idle)') return '(idle)';
    if (name === '(garbage collector)') return 'GC';
    if (name === '(program)') return 'V8/native (program)';
    if (name === '(root)') return '(root)';
    if (/^(writev|writeBuffer|write\w*String|writeUtf8String|readStart|shutdown|close)$/.test(name))
      return 'native: socket I/O';
    if (name === 'parse' || name === 'stringify') return 'V8: JSON';
    return 'V8 builtins / native';
  }
  if (file.startsWith('node:')) {
    if (/^node:_tls|^node:tls|^node:internal\/tls/.test(file)) return 'node: tls';
    if (/^node:_http_|^node:internal\/http|^node:https?$/.test(file)) return 'node: http';
    if (/^node:internal\/streams|^node:stream/.test(file)) return 'node: streams';
    if (/^node:net$|^node:internal\/stream_base|^node:internal\/net/.test(file))
      return 'node: net/socket';
    if (/^node:internal\/(modules|deps\/amaro|bootstrap)/.test(file)) return 'node: module loading';
    return 'node: other';
  }
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file);
  if (pkg !== null) return `dep: ${pkg[1]}`;
  const top = /^(controller\/core|controller|crds|cli|sidecar|bin)\//.exec(file);
  if (top !== null) return `switchyard: ${top[1]}`;
  return 'other JS';
}

export function summariseProfile(
  path: string,
  repoRoot: string,
  window?: { fromUs: number; toUs: number; label: string },
  top = 20,
): ProfileSummary {
  const profile = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  const root = repoRoot.endsWith('/') ? repoRoot : `${repoRoot}/`;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const keyOf = (node: ProfileNode): { key: string; area: string } => {
    const f = node.callFrame;
    const file = fileOf(f.url, root);
    const name = f.functionName === '' ? '(anonymous)' : f.functionName;
    return {
      key: file === '' ? name : `${name} ${file}:${f.lineNumber + 1}`,
      area: areaOf(f.functionName, file),
    };
  };
  const self = new Map<string, { area: string; us: number }>();
  const inclusive = new Map<string, { area: string; us: number }>();
  const areas = new Map<string, number>();
  let total = 0;
  let idle = 0;
  let at = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    // Each sample owns the time until the next one.
    const dt = profile.timeDeltas[i + 1] ?? 0;
    if (window !== undefined && (at < window.fromUs || at > window.toUs)) continue;
    const node = byId.get(profile.samples[i]!);
    if (node === undefined) continue;
    total += dt;
    const { key, area } = keyOf(node);
    if (area === '(idle)') {
      idle += dt;
      continue;
    }
    const s = self.get(key) ?? { area, us: 0 };
    s.us += dt;
    self.set(key, s);
    areas.set(area, (areas.get(area) ?? 0) + dt);
    const onStack = new Set<string>();
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const k = keyOf(byId.get(id)!);
      if (onStack.has(k.key)) continue;
      onStack.add(k.key);
      // The CLI and commander frames sit under everything the start-up does: noise here.
      if (!k.area.startsWith('switchyard') && !k.area.startsWith('dep:')) continue;
      if (k.area === 'switchyard: cli' || k.area === 'dep: commander') continue;
      const inc = inclusive.get(k.key) ?? { area: k.area, us: 0 };
      inc.us += dt;
      inclusive.set(k.key, inc);
    }
  }
  const busy = total - idle;
  const ms = (us: number): number => Math.round(us / 100) / 10;
  const pct = (us: number): number => (busy > 0 ? Math.round((us / busy) * 1000) / 10 : 0);
  const rank = (m: Map<string, { area: string; us: number }>): FunctionTime[] =>
    [...m]
      .sort(([, a], [, b]) => b.us - a.us)
      .slice(0, top)
      .map(([fn, v]) => ({ function: fn, area: v.area, ms: ms(v.us), pct: pct(v.us) }));
  return {
    file: path,
    window: window?.label ?? 'whole profile',
    totalMs: ms(total),
    busyMs: ms(busy),
    areas: [...areas]
      .sort(([, a], [, b]) => b - a)
      .map(([area, us]) => ({ area, ms: ms(us), pct: pct(us) })),
    topSelf: rank(self),
    topInclusive: rank(inclusive),
  };
}
