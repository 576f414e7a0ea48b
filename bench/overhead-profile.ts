/**
 * Summarises a V8 `.cpuprofile` (as written by `node --cpu-prof`): self time by function
 * (name + file:line), inclusive time by function, and time by area (node's HTTP stack,
 * http-proxy-3, the sidecar's own files, GC, idle...). The raw profile stays out of git.
 */
import { readFileSync } from 'node:fs';
import { round3 } from './overhead-load.ts';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
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
  /** Percent of the non-idle time. */
  pct: number;
}

export interface ProfileSummary {
  file: string;
  /**
   * The part of the profile summarised: the measured load only (start-up, module loading and the
   * warm-up left out), as CLOCK_MONOTONIC µs, which is V8's profile clock and process.hrtime's.
   */
  window: { fromUs: number; toUs: number } | 'whole profile';
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
  /** How the profiled proxy was placed on the cores. */
  pinned?: string | undefined;
  /** Busy time by area, largest first. */
  areas: { area: string; ms: number; pct: number; usPerRequest?: number | undefined }[];
  /** Top functions by self time. */
  topSelf: FunctionTime[];
  /**
   * Top switchyard and dependency functions by inclusive time (self + callees): what each
   * step of the sidecar's own request path costs, node's work on its behalf included.
   */
  topInclusive: FunctionTime[];
}

function shortUrl(url: string, root: string): string {
  if (url === '') return '';
  let path = url.startsWith('file://') ? decodeURIComponent(url.slice('file://'.length)) : url;
  if (path.startsWith(root)) path = path.slice(root.length);
  return path;
}

/** Which part of the stack a frame belongs to. */
export function areaOf(frame: CallFrame, file: string): string {
  const name = frame.functionName;
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
    if (/^node:_http_|^node:internal\/http|^node:http$/.test(file)) return 'node: http';
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
  if (file.startsWith('sidecar/proxy/')) return 'switchyard: sidecar/proxy';
  if (file.startsWith('sidecar/policy/')) return 'switchyard: sidecar/policy';
  if (file.startsWith('sidecar/')) return 'switchyard: sidecar';
  if (file.startsWith('bench/')) return 'bench harness';
  if (/^(cli|bin|crds)\//.test(file)) return 'switchyard: cli/config';
  return 'other JS';
}

export function summariseProfile(
  path: string,
  repoRoot: string,
  options: { top?: number; window?: { fromUs: number; toUs: number }; requests?: number } = {},
): ProfileSummary {
  const top = options.top ?? 20;
  const profile = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  // Use the window only if it overlaps the profile (the clocks are the same on Linux).
  const window =
    options.window !== undefined &&
    options.window.fromUs < profile.endTime &&
    options.window.toUs > profile.startTime
      ? options.window
      : undefined;
  const root = repoRoot.endsWith('/') ? repoRoot : `${repoRoot}/`;
  const byId = new Map<number, ProfileNode>();
  for (const node of profile.nodes) byId.set(node.id, node);

  // Self time per node: each sample owns the time until the next one.
  const selfUs = new Map<number, number>();
  const { samples, timeDeltas } = profile;
  let at = profile.startTime;
  let counted = 0;
  for (let i = 0; i < samples.length; i++) {
    at += timeDeltas[i] ?? 0;
    if (window !== undefined && (at < window.fromUs || at > window.toUs)) continue;
    const dt = timeDeltas[i + 1] ?? 0;
    selfUs.set(samples[i]!, (selfUs.get(samples[i]!) ?? 0) + Math.max(0, dt));
    counted++;
  }

  const keyOf = new Map<number, { key: string; area: string; js: boolean }>();
  for (const node of profile.nodes) {
    const file = shortUrl(node.callFrame.url, root);
    const name = node.callFrame.functionName || '(anonymous)';
    const key = file === '' ? name : `${name} ${file}:${node.callFrame.lineNumber + 1}`;
    keyOf.set(node.id, { key, area: areaOf(node.callFrame, file), js: file !== '' });
  }

  let totalUs = 0;
  let idleUs = 0;
  const selfByKey = new Map<string, { area: string; us: number }>();
  const byArea = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const info = keyOf.get(id)!;
    totalUs += us;
    if (info.area === '(idle)') {
      idleUs += us;
      continue;
    }
    const entry = selfByKey.get(info.key) ?? { area: info.area, us: 0 };
    entry.us += us;
    selfByKey.set(info.key, entry);
    byArea.set(info.area, (byArea.get(info.area) ?? 0) + us);
  }
  const busyUs = Math.max(1, totalUs - idleUs);

  // Inclusive time per function, counting a function once per stack even when it recurses.
  const inclusiveNode = new Map<number, number>();
  const inclusiveOf = (id: number): number => {
    const cached = inclusiveNode.get(id);
    if (cached !== undefined) return cached;
    let us = selfUs.get(id) ?? 0;
    for (const child of byId.get(id)?.children ?? []) us += inclusiveOf(child);
    inclusiveNode.set(id, us);
    return us;
  };
  const inclusiveByKey = new Map<string, { area: string; us: number }>();
  const onStack = new Map<string, number>();
  const walk = (id: number): void => {
    const info = keyOf.get(id)!;
    const depth = onStack.get(info.key) ?? 0;
    if (depth === 0 && info.js) {
      const entry = inclusiveByKey.get(info.key) ?? { area: info.area, us: 0 };
      entry.us += inclusiveOf(id);
      inclusiveByKey.set(info.key, entry);
    }
    onStack.set(info.key, depth + 1);
    for (const child of byId.get(id)?.children ?? []) walk(child);
    onStack.set(info.key, depth);
  };
  const rootNode = profile.nodes[0];
  if (rootNode !== undefined) walk(rootNode.id);

  const ms = (us: number): number => round3(us / 1000);
  const pct = (us: number): number => Math.round((us / busyUs) * 1000) / 10;
  const perRequest = (us: number): number | undefined =>
    options.requests === undefined || options.requests === 0
      ? undefined
      : Math.round((us / options.requests) * 10) / 10;
  const rank = (
    m: Map<string, { area: string; us: number }>,
    keep: (area: string) => boolean = () => true,
  ): FunctionTime[] =>
    [...m.entries()]
      .filter(([, { area }]) => keep(area))
      .sort((a, b) => b[1].us - a[1].us)
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
    areas: [...byArea.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([area, us]) => ({ area, ms: ms(us), pct: pct(us), usPerRequest: perRequest(us) })),
    topSelf: rank(selfByKey),
    topInclusive: rank(
      inclusiveByKey,
      (area) => area.startsWith('switchyard') || area.startsWith('dep:'),
    ),
  };
}
