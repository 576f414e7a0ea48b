/**
 * Drift probes (docs/drift.md): ask each endpoint what it serves (GET /models) and for one
 * deterministic completion (temperature 0, a fixed seed, a few tokens, a fixed prompt), and turn
 * the answer into a fingerprint (crds/drift.ts). Used by the controller, which probes every pool
 * that sets `drift.probeEvery`, and by a standalone sidecar, which probes its own pool file's
 * endpoints. It only asks; what a fingerprint means is decided elsewhere.
 *
 * A probe is small and rare by construction: one endpoint at a time per slot, at most
 * `concurrency` slots, each endpoint every `everyMs` (jittered so that endpoints and replicas do
 * not probe in step), 16 output tokens.
 */
import { createHash } from 'node:crypto';
import { fingerprintOf, type ProbeObservation } from '../crds/drift.ts';

/** The built-in probe prompt (`drift.prompt` replaces it). */
export const DEFAULT_DRIFT_PROMPT =
  'Complete the sequence with the next five items and nothing else: 2, 3, 5, 7, 11,';
export const PROBE_MAX_TOKENS = 16;
export const PROBE_SEED = 1234;

export interface ProbeTarget {
  /** Endpoint id (backend/host:port). */
  id: string;
  /** OpenAI base URL, with the API prefix (`http://10.0.0.7:8000/v1`). */
  url: string;
  apiKey?: string | undefined;
  /** The model to ask for (the backend's rewrite); default: the first one GET /models lists. */
  model?: string | undefined;
}

export type ProbeResult =
  | { ok: true; observation: ProbeObservation; fingerprint: string; atMs: number }
  | { ok: false; error: string; atMs: number };

const clip = (s: string): string => (s.length > 200 ? `${s.slice(0, 200)}…` : s);

/** One probe of one endpoint. Never throws: a failure is a result (and is not drift). */
export async function probeOnce(
  target: ProbeTarget,
  options: { prompt: string; timeoutMs: number; now?: () => number },
): Promise<ProbeResult> {
  const now = options.now ?? Date.now;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (target.apiKey !== undefined) headers['authorization'] = `Bearer ${target.apiKey}`;
  const base = target.url.replace(/\/$/, '');
  try {
    let model = target.model;
    let listed: string | undefined;
    const models = await fetch(`${base}/models`, {
      headers,
      signal: AbortSignal.timeout(options.timeoutMs),
    });
    if (models.ok) {
      const body = (await models.json()) as { data?: { id?: unknown }[] };
      const first = body.data?.find((m) => typeof m.id === 'string')?.id;
      listed = typeof first === 'string' ? first : undefined;
    } else {
      await models.body?.cancel();
    }
    model ??= listed;
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        model: model ?? 'default',
        messages: [{ role: 'user', content: options.prompt }],
        temperature: 0,
        seed: PROBE_SEED,
        max_tokens: PROBE_MAX_TOKENS,
        stream: false,
      }),
      signal: AbortSignal.timeout(options.timeoutMs),
    });
    const text = await res.text();
    if (!res.ok) return { ok: false, error: clip(`completion: HTTP ${res.status}`), atMs: now() };
    const body = JSON.parse(text) as {
      model?: unknown;
      system_fingerprint?: unknown;
      choices?: { message?: { content?: unknown }; text?: unknown }[];
    };
    const choice = body.choices?.[0];
    const content = choice?.message?.content ?? choice?.text;
    if (typeof content !== 'string')
      return { ok: false, error: 'completion: no text in choices[0]', atMs: now() };
    const observation: ProbeObservation = {
      modelId: typeof body.model === 'string' ? body.model : listed,
      systemFingerprint:
        typeof body.system_fingerprint === 'string' ? body.system_fingerprint : undefined,
      outputHash: createHash('sha256').update(content).digest('hex'),
    };
    return { ok: true, observation, fingerprint: fingerprintOf(observation), atMs: now() };
  } catch (err) {
    const e = err as Error;
    const why = e.name === 'TimeoutError' ? `timed out after ${options.timeoutMs} ms` : e.message;
    return { ok: false, error: clip(why), atMs: now() };
  }
}

export interface DriftProberOptions {
  everyMs: number;
  prompt?: string | undefined;
  /** Probes running at once. Default 4. */
  concurrency?: number;
  /** Each endpoint's period varies by ± this fraction. Default 0.1. */
  jitter?: number;
  timeoutMs?: number;
  onResult: (target: ProbeTarget, result: ProbeResult) => void;
  random?: () => number;
}

interface Scheduled {
  target: ProbeTarget;
  dueAtMs: number;
  running: boolean;
}

/** Probes a changing set of endpoints on a schedule. */
export class DriftProber {
  readonly #options: DriftProberOptions;
  readonly #targets = new Map<string, Scheduled>();
  #timer: NodeJS.Timeout | undefined;
  #running = 0;
  #stopped = false;

  constructor(options: DriftProberOptions) {
    this.#options = options;
  }

  get everyMs(): number {
    return this.#options.everyMs;
  }

  /** The endpoints to probe from now on; a new one is probed soon, within min(period, 2 s). */
  setTargets(targets: readonly ProbeTarget[]): void {
    const random = this.#options.random ?? Math.random;
    const wanted = new Map(targets.map((t) => [t.id, t]));
    for (const id of this.#targets.keys()) if (!wanted.has(id)) this.#targets.delete(id);
    for (const [id, target] of wanted) {
      const known = this.#targets.get(id);
      if (known !== undefined) known.target = target;
      else
        this.#targets.set(id, {
          target,
          dueAtMs: performance.now() + random() * Math.min(this.#options.everyMs, 2_000),
          running: false,
        });
    }
    this.#arm();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#targets.clear();
  }

  #arm(): void {
    if (this.#stopped) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    let next = Infinity;
    for (const s of this.#targets.values()) if (!s.running) next = Math.min(next, s.dueAtMs);
    if (!Number.isFinite(next)) return;
    this.#timer = setTimeout(() => this.#run(), Math.max(0, next - performance.now()));
    this.#timer.unref();
  }

  #run(): void {
    this.#timer = undefined;
    const concurrency = this.#options.concurrency ?? 4;
    const now = performance.now();
    const due = [...this.#targets.values()]
      .filter((s) => !s.running && s.dueAtMs <= now)
      .sort((a, b) => a.dueAtMs - b.dueAtMs);
    for (const s of due) {
      if (this.#running >= concurrency) break;
      s.running = true;
      this.#running++;
      void probeOnce(s.target, {
        prompt: this.#options.prompt ?? DEFAULT_DRIFT_PROMPT,
        timeoutMs: this.#options.timeoutMs ?? 10_000,
      }).then((result) => {
        this.#running--;
        s.running = false;
        const random = this.#options.random ?? Math.random;
        const jitter = this.#options.jitter ?? 0.1;
        s.dueAtMs = performance.now() + this.#options.everyMs * (1 + jitter * (2 * random() - 1));
        // A target removed meanwhile reports nothing.
        if (!this.#stopped && this.#targets.get(s.target.id) === s)
          this.#options.onResult(s.target, result);
        this.#arm();
      });
    }
    this.#arm();
  }
}
