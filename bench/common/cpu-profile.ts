/**
 * Summarises a V8 `.cpuprofile` (as written by `node --cpu-prof`) over a window of time: busy
 * time by area (node's HTTP or TLS stack, a dependency, a folder of switchyard's own code, GC,
 * idle...), the top functions by self time, and switchyard and dependency functions by inclusive
 * time (self + callees: what each step of our own path costs, node's work on its behalf
 * included). The overhead bench profiles the sidecar's hot path, the controller bench the
 * controller's sync, idle and write phases. The raw profiles stay out of git.
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
  /** `name file:line` (file relative to the repository, or `node:...`). */
  function: string;
  area: string;
  ms: number;
  /** Percent of the busy (non-idle) time. */
  pct: number;
}

/** A stretch of the profile, in CLOCK_MONOTONIC µs: V8's profile clock and process.hrtime's. */
export interface ProfileWindow {
  fromUs: number;
  toUs: number;
}

export interface ProfileSummary {
  file: string;
  /** The part summarised; the whole profile when the window given does not overlap it. */
  window: ProfileWindow | 'whole profile';
  /** Requests completed in the window, when known: makes `usPerRequest` columns comparable. */
  requests?: number | undefined;
  /** Wall time the summary covers. */
  totalMs: number;
  idleMs: number;
  /** Non-idle time (everything the percentages are of). */
  busyMs: number;
  samples: number;
  /**
   * Non-idle µs per request in the window, as the profile sees it: V8 samples wall time, so
   * this includes any time the thread waited for a core (and the profiler's own overhead).
   */
  busyUsPerRequest?: number | undefined;
  /** The process's CPU time per request in the window, from /proc (all its threads). */
  cpuUsPerRequest?: number | undefined;
  /** How the profiled process was placed on the cores. */
  pinned?: string | undefined;
  /** Busy time by area, largest first. */
  areas: { area: string; ms: number; pct: number; usPerRequest?: number | undefined }[];
  /** Top functions by self time. */
  topSelf: FunctionTime[];
  /** Top switchyard and dependency functions by inclusive time. */
  topInclusive: FunctionTime[];
}

function shortUrl(url: string, root: string): string {
  if (url === '') return '';
  let path = url.startsWith('file://') ? decodeURIComponent(url.slice('file://'.length)) : url;
  if (path.startsWith(root)) path = path.slice(root.length);
  return path;
}

/** Which part of the stack a frame belongs to (`file` relative to the repository). */
export function areaOf(name: string, file: string): string {
  if (file === '') {
    if (name === '(idle)') return '(idle)';
    if (name === '(garbage collector)') return 'GC';
    if (name === '(program)') return 'V8/native (program)';
    if (name === '(root)') return '(root)';
    // Native socket bindings: the syscalls, and on loopback the kernel's TCP work with them.
    if (/^(writev|writeBuffer|write\w*String|readStart|readStop|shutdown|close)$/.test(name))
      return 'native: socket I/O (syscalls)';
    if (name === 'parse' || name === 'stringify') return 'V8: JSON';
    return 'V8 builtins / native';
  }
  if (file.startsWith('node:')) {
    if (/^node:_tls|^node:tls$|^node:internal\/tls/.test(file)) return 'node: tls';
    if (/^node:_http_|^node:internal\/http|^node:https?$/.test(file)) return 'node: http';
    if (/^node:internal\/streams|^node:stream/.test(file)) return 'node: streams';
    if (
      /^node:net$|^node:internal\/stream_base|^node:internal\/net|^node:internal\/dgram/.test(file)
    )
      return 'node: net/socket';
    if (/^node:internal\/timers|^node:timers/.test(file)) return 'node: timers';
    if (/^node:events$|^node:internal\/events/.test(file)) return 'node: events';
    if (/^node:internal\/url|^node:url$/.test(file)) return 'node: url';
    if (/^node:internal\/(process\/task_queues|async_hooks|async_context)/.test(file))
      return 'node: microtasks/async';
    if (/^node:internal\/(modules|deps\/amaro|bootstrap)/.test(file)) return 'node: module loading';
    return 'node: other';
  }
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file);
  if (pkg !== null) return `dep: ${pkg[1]}`;
  if (file.startsWith('bench/')) return 'bench harness';
  // Our own code by folder, one level down where a folder has rooms (sidecar/proxy,
  // controller/core): the level at which the code is organised.
  if (!/^[\w-]+\//.test(file)) return 'other JS'; // outside the repository, or wasm://
  return `switchyard: ${file.split('/').slice(0, -1).slice(0, 2).join('/')}`;
}

/**
 * Functions that count in the inclusive ranking: ours and our dependencies'. The CLI and
 * commander sit under everything the start-up does, which would crowd out the rest.
 */
const ranksInclusive = (area: string): boolean =>
  (area.startsWith('switchyard') || area.startsWith('dep:')) &&
  area !== 'switchyard: cli' &&
  area !== 'dep: commander';

export function summariseProfile(
  path: string,
  repoRoot: string,
  options: { window?: ProfileWindow; requests?: number; top?: number } = {},
): ProfileSummary {
  const top = options.top ?? 20;
  const profile = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  const window =
    options.window !== undefined &&
    options.window.fromUs < profile.endTime &&
    options.window.toUs > profile.startTime
      ? options.window
      : undefined;
  const root = repoRoot.endsWith('/') ? repoRoot : `${repoRoot}/`;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const infoCache = new Map<number, { key: string; area: string }>();
  const infoOf = (node: ProfileNode): { key: string; area: string } => {
    let info = infoCache.get(node.id);
    if (info === undefined) {
      const file = shortUrl(node.callFrame.url, root);
      const name = node.callFrame.functionName || '(anonymous)';
      const key = file === '' ? name : `${name} ${file}:${node.callFrame.lineNumber + 1}`;
      info = { key, area: areaOf(node.callFrame.functionName, file) };
      infoCache.set(node.id, info);
    }
    return info;
  };

  const self = new Map<string, { area: string; us: number }>();
  const inclusive = new Map<string, { area: string; us: number }>();
  const byArea = new Map<string, number>();
  let totalUs = 0;
  let idleUs = 0;
  let counted = 0;
  let at = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    if (window !== undefined && (at < window.fromUs || at > window.toUs)) continue;
    const node = byId.get(profile.samples[i]!);
    if (node === undefined) continue;
    // Each sample owns the time until the next one.
    const dt = Math.max(0, profile.timeDeltas[i + 1] ?? 0);
    counted++;
    totalUs += dt;
    const { key, area } = infoOf(node);
    if (area === '(idle)') {
      idleUs += dt;
      continue;
    }
    const s = self.get(key) ?? { area, us: 0 };
    s.us += dt;
    self.set(key, s);
    byArea.set(area, (byArea.get(area) ?? 0) + dt);
    // Inclusive: once per function on the sample's stack, even when it recurses.
    const onStack = new Set<string>();
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const frame = infoOf(byId.get(id)!);
      if (onStack.has(frame.key) || !ranksInclusive(frame.area)) continue;
      onStack.add(frame.key);
      const inc = inclusive.get(frame.key) ?? { area: frame.area, us: 0 };
      inc.us += dt;
      inclusive.set(frame.key, inc);
    }
  }
  const busyUs = Math.max(1, totalUs - idleUs);

  const ms = (us: number): number => Math.round(us) / 1000;
  const pct = (us: number): number => Math.round((us / busyUs) * 1000) / 10;
  const perRequest = (us: number): number | undefined =>
    options.requests === undefined || options.requests === 0
      ? undefined
      : Math.round((us / options.requests) * 10) / 10;
  const rank = (m: Map<string, { area: string; us: number }>): FunctionTime[] =>
    [...m]
      .sort(([, a], [, b]) => b.us - a.us)
      .slice(0, top)
      .map(([fn, { area, us }]) => ({ function: fn, area, ms: ms(us), pct: pct(us) }));

  return {
    file: path,
    window: window ?? 'whole profile',
    requests: options.requests,
    totalMs: ms(totalUs),
    idleMs: ms(idleUs),
    busyMs: ms(busyUs),
    samples: counted,
    busyUsPerRequest: perRequest(busyUs),
    areas: [...byArea]
      .sort(([, a], [, b]) => b - a)
      .map(([area, us]) => ({ area, ms: ms(us), pct: pct(us), usPerRequest: perRequest(us) })),
    topSelf: rank(self),
    topInclusive: rank(inclusive),
  };
}
