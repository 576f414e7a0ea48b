/**
 * vLLM with LoRA adapters: the tiny adapter scripts/engine/make-adapter.py makes with PEFT (cached
 * like the tiny models), a server started with adapters loaded at start and, if asked, vLLM's
 * runtime loading API, and a reader for the `vllm:lora_requests_info` series. Used by
 * test/engine/lora.test.ts; the facts behind it are in docs/engine.md ("LoRA adapters").
 */
import { fileURLToPath } from 'node:url';
import { runBuildScript } from '../build-script.ts';
import { engineVenv, tinyModel, venvPython } from './install.ts';
import { startVllm, type VllmOptions, type VllmServer } from './vllm.ts';

export const MAKE_ADAPTER_SCRIPT = fileURLToPath(
  new URL('../../scripts/engine/make-adapter.py', import.meta.url),
);

/** The rank make-adapter.py writes, and so the `--max-lora-rank` a server needs. */
export const ADAPTER_RANK = 8;

const adapters = new Map<string, Promise<string>>();

/**
 * Makes (or finds in the cache) the LoRA adapter of `seed` for the tiny model of `baseSeed`;
 * resolves with its directory (what `--lora-modules NAME=DIR` and `load_lora_adapter` take).
 */
export function tinyAdapter(seed: number, baseSeed = 1): Promise<string> {
  const key = `${seed}/${baseSeed}`;
  let made = adapters.get(key);
  if (made === undefined) {
    made = Promise.all([engineVenv(), tinyModel(baseSeed)]).then(([venv, base]) =>
      runBuildScript(
        venvPython(venv),
        [MAKE_ADAPTER_SCRIPT, '--base', base, '--seed', String(seed)],
        '[engine-adapter]',
      ),
    );
    adapters.set(key, made);
    made.catch(() => adapters.delete(key));
  }
  return made;
}

export interface Adapter {
  /** The name clients ask for (the request's `model`). */
  name: string;
  /** Its directory (tinyAdapter()). */
  path: string;
}

export interface LoraVllmOptions extends VllmOptions {
  /** Adapters loaded at start (`--lora-modules NAME=DIR`, one each). May be empty. */
  adapters: readonly Adapter[];
  /** `--max-loras`: adapters a batch may hold at once; default 2. */
  maxLoras?: number | undefined;
  /**
   * `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`: POST /v1/load_lora_adapter and
   * /v1/unload_lora_adapter are served (404 otherwise). Default false.
   */
  runtimeUpdates?: boolean | undefined;
}

/** The arguments that turn LoRA on (after the usual ones of startVllm). */
export function loraArgs(options: Pick<LoraVllmOptions, 'adapters' | 'maxLoras'>): string[] {
  return [
    '--enable-lora',
    '--max-loras',
    String(options.maxLoras ?? 2),
    '--max-lora-rank',
    String(ADAPTER_RANK),
    ...(options.adapters.length === 0
      ? []
      : ['--lora-modules', ...options.adapters.map((a) => `${a.name}=${a.path}`)]),
  ];
}

/** startVllm with LoRA enabled (and the given adapters loaded); ready once the base is listed. */
export function startVllmWithAdapters(options: LoraVllmOptions): Promise<VllmServer> {
  return startVllm({
    ...options,
    extraArgs: [...(options.extraArgs ?? []), ...loraArgs(options)],
    env: {
      ...(options.runtimeUpdates === true ? { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' } : {}),
      ...options.env,
    },
  });
}

/** POST /v1/load_lora_adapter; resolves with vLLM's status and body (200 and a sentence when loaded). */
export async function loadAdapter(
  server: VllmServer,
  adapter: Adapter,
): Promise<{ status: number; text: string }> {
  const res = await fetch(`${server.url}/v1/load_lora_adapter`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ lora_name: adapter.name, lora_path: adapter.path }),
  });
  return { status: res.status, text: await res.text() };
}

/** POST /v1/unload_lora_adapter; resolves with vLLM's status and body. */
export async function unloadAdapter(
  server: VllmServer,
  name: string,
): Promise<{ status: number; text: string }> {
  const res = await fetch(`${server.url}/v1/unload_lora_adapter`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ lora_name: name }),
  });
  return { status: res.status, text: await res.text() };
}

export interface LoraRequestsInfo {
  maxLora: number;
  running: string[];
  waiting: string[];
  /** The gauge's value: when vLLM last changed the series (Unix seconds). */
  timestamp: number;
}

/**
 * The newest `vllm:lora_requests_info` series of a /metrics text, or undefined when there is
 * none. vLLM keeps one series per label combination it has seen, each with the time it was last
 * current as its value, so the one with the largest value is the current state.
 */
export function loraRequestsInfo(metricsText: string): LoraRequestsInfo | undefined {
  let newest: LoraRequestsInfo | undefined;
  for (const line of metricsText.split('\n')) {
    if (!line.startsWith('vllm:lora_requests_info{')) continue;
    const labels = new Map<string, string>();
    for (const m of line.matchAll(/(\w+)="([^"]*)"/g)) labels.set(m[1]!, m[2]!);
    const timestamp = Number(line.slice(line.lastIndexOf(' ') + 1));
    const list = (value: string | undefined): string[] =>
      value === undefined || value === '' ? [] : value.split(',');
    if (newest === undefined || timestamp > newest.timestamp) {
      newest = {
        maxLora: Number(labels.get('max_lora')),
        running: list(labels.get('running_lora_adapters')),
        waiting: list(labels.get('waiting_lora_adapters')),
        timestamp,
      };
    }
  }
  return newest;
}
