/**
 * Options of the backend simulator (`switchyard sim`), their defaults, and a description of each
 * one that does not depend on commander: the CLI turns `SIM_OPTION_SPECS` into flags, the admin
 * API validates run-time patches with `checkSimOptionsPatch`. All durations are simulated
 * milliseconds; `speed` divides every one of them to get wall-clock time.
 */
import type { EngineOptions } from './engine/engine-options.ts';

/**
 * Every option: the engine model's (`EngineOptions`, documented there) and what only the HTTP side
 * reads. One flat object, as the CLI flags and the admin API's JSON patches are flat.
 */
export interface SimOptions extends EngineOptions {
  /** TCP port; 0 = any free port. */
  port: number;
  /** Interface to listen on. */
  host: string;
  /** Sent back as `x-sim-backend` on every response; undefined = `sim-<port>`. */
  name: string | undefined;
  /** The only model served (others get 404 `model_not_found`); undefined = any model name. */
  model: string | undefined;
  /** Returned as `system_fingerprint`; undefined = the field is omitted. */
  fingerprint: string | undefined;
  /**
   * The context length in tokens, as vLLM's `--max-model-len`: a longer prompt or a larger
   * `max_tokens` is a 400, an answer that would not fit is cut. Undefined = no limit (and 131,072
   * reported where vLLM reports its own).
   */
  maxModelLen: number | undefined;
  /**
   * As vLLM's `--api-key`: requests under `/v1`, `/v2`, `/inference` and `/cohere` need
   * `Authorization: Bearer <key>` (else 401 `{"error":"Unauthorized"}`); undefined = none needed.
   */
  apiKey: string | undefined;
  /**
   * Whose load reports to imitate: `vllm` (`/metrics` with vLLM's names, the ORCA header on
   * request) or `sglang` (SGLang's metric names, no ORCA header, as SGLang has none).
   */
  engine: SimEngineKind;
  /**
   * How long an idle keep-alive connection stays open, in wall-clock ms (not divided by `speed`:
   * it is the HTTP server's timer, not the model's). 65 s by default, so a proxy's pooled upstream
   * socket is not closed under it; uvicorn's default (vLLM's server) is 5 s.
   */
  keepAliveMs: number;
  /**
   * Serve https with this certificate (a PEM file, the chain after the leaf if any) and
   * `tlsKey`'s private key; both or neither. Read once at start.
   */
  tlsCert: string | undefined;
  /** The PEM file of the private key of `tlsCert`. */
  tlsKey: string | undefined;
  /**
   * LoRA adapters the server can serve, comma-separated (as vLLM's `--lora-modules` names them);
   * each is listed in `/v1/models` with `parent` = the served model. Undefined = none.
   */
  loras: string | undefined;
  /**
   * As vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`: `POST /v1/load_lora_adapter` and
   * `/v1/unload_lora_adapter` add and remove adapters at run time (404 otherwise, as vLLM's).
   */
  allowRuntimeLoraUpdating: boolean;
}

/** The model servers whose load reporting the simulator can imitate. */
export const SIM_ENGINE_KINDS = ['vllm', 'sglang'] as const;
export type SimEngineKind = (typeof SIM_ENGINE_KINDS)[number];

/**
 * What loading a LoRA adapter that is not resident costs by default, in simulated ms: a rank 8-16
 * adapter of a 7-8B model read from local disk into GPU memory, where vLLM users report that a
 * request which loads its adapter takes a second or two longer than one that finds it loaded
 * (docs/simulator.md#lora-adapters names the sources).
 */
export const LORA_LOAD_MS = 2000;

export const DEFAULT_SIM_OPTIONS: Readonly<SimOptions> = Object.freeze({
  port: 0,
  host: '127.0.0.1',
  name: undefined,
  model: undefined,
  slots: 4,
  queueLimit: 64,
  prefillMsPerToken: 0.05,
  decodeMsPerToken: 10,
  loadSlowdown: 0.5,
  blockTokens: 16,
  cacheBlocks: 4096,
  charsPerToken: 4,
  errorRate: 0,
  rateLimitRate: 0,
  stallRate: 0,
  coldStartMs: 0,
  coldIdleMs: 10_000,
  fingerprint: undefined,
  maxModelLen: undefined,
  apiKey: undefined,
  engine: 'vllm',
  keepAliveMs: 65_000,
  tlsCert: undefined,
  tlsKey: undefined,
  loras: undefined,
  maxLoras: 1,
  loraLoadMs: LORA_LOAD_MS,
  allowRuntimeLoraUpdating: false,
  tokensPerChunk: 1,
  speed: 1,
  seed: 1,
});

export type SimOptionKey = keyof SimOptions;
export type SimOptionType = 'integer' | 'number' | 'string' | 'boolean';

/** Everything a CLI or an API needs to know about one option. */
export interface SimOptionSpec {
  readonly key: SimOptionKey;
  /** Long flag, e.g. `--queue-limit`; its camelCase form is `key` (commander's `opts()` name). */
  readonly flag: string;
  /** Placeholder for the value in help text, e.g. `<n>`. */
  readonly valueName: string;
  readonly type: SimOptionType;
  readonly default: number | string | boolean | undefined;
  /** Inclusive lower bound (numbers). */
  readonly min?: number;
  /** True when the value must be strictly greater than `min`. */
  readonly minExclusive?: boolean;
  /** Inclusive upper bound (numbers). */
  readonly max?: number;
  /** May be undefined (unset); `null` in a JSON patch unsets it. */
  readonly optional: boolean;
  /** May be changed at run time through `POST /admin/config` / `configure()`. */
  readonly runtime: boolean;
  /** The only values a string option accepts. */
  readonly choices?: readonly string[];
  readonly help: string;
}

function spec(
  key: SimOptionKey,
  valueName: string,
  type: SimOptionType,
  help: string,
  extra: Partial<
    Pick<SimOptionSpec, 'min' | 'minExclusive' | 'max' | 'optional' | 'runtime' | 'choices'>
  > = {},
): SimOptionSpec {
  const flag = '--' + key.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
  return {
    key,
    flag,
    valueName,
    type,
    default: DEFAULT_SIM_OPTIONS[key],
    optional: extra.optional ?? false,
    runtime: extra.runtime ?? true,
    help,
    ...(extra.min === undefined ? {} : { min: extra.min }),
    ...(extra.minExclusive === undefined ? {} : { minExclusive: extra.minExclusive }),
    ...(extra.max === undefined ? {} : { max: extra.max }),
    ...(extra.choices === undefined ? {} : { choices: extra.choices }),
  };
}

const FRACTION = { min: 0, max: 1 } as const;
const NON_NEGATIVE = { min: 0 } as const;
const POSITIVE = { min: 0, minExclusive: true } as const;

/** Every option, in the order a `--help` screen should list them. */
export const SIM_OPTION_SPECS: readonly SimOptionSpec[] = Object.freeze([
  spec('port', '<port>', 'integer', 'TCP port to listen on (0 = any free port)', {
    min: 0,
    max: 65535,
    runtime: false,
  }),
  spec('host', '<host>', 'string', 'interface to listen on', { runtime: false }),
  spec('name', '<name>', 'string', 'backend name sent as x-sim-backend (default sim-<port>)', {
    optional: true,
  }),
  spec('model', '<model>', 'string', 'only serve this model (others get 404); default any', {
    optional: true,
  }),
  spec('slots', '<n>', 'integer', 'concurrent generations', { min: 1, max: 100_000 }),
  spec('queueLimit', '<n>', 'integer', 'requests that may wait for a slot; beyond: 429', {
    min: 0,
    max: 1_000_000,
  }),
  spec(
    'prefillMsPerToken',
    '<ms>',
    'number',
    'prefill time per uncached prompt token',
    NON_NEGATIVE,
  ),
  spec(
    'decodeMsPerToken',
    '<ms>',
    'number',
    'decode time per output token when idle',
    NON_NEGATIVE,
  ),
  spec(
    'loadSlowdown',
    '<factor>',
    'number',
    'decode slows by 1 + factor × (busy slots − 1) / slots',
    NON_NEGATIVE,
  ),
  spec('blockTokens', '<n>', 'integer', 'prefix cache block size in tokens', {
    min: 1,
    max: 1_000_000,
  }),
  spec('cacheBlocks', '<n>', 'integer', 'prefix cache capacity in blocks, LRU (0 = off)', {
    min: 0,
    max: 100_000_000,
  }),
  spec('charsPerToken', '<n>', 'number', 'characters per estimated token', POSITIVE),
  spec(
    'errorRate',
    '<fraction>',
    'number',
    'fraction of generations answered 500 at once',
    FRACTION,
  ),
  spec(
    'rateLimitRate',
    '<fraction>',
    'number',
    'fraction of generations answered 429 (Retry-After: 1) at once',
    FRACTION,
  ),
  spec(
    'stallRate',
    '<fraction>',
    'number',
    'fraction of generations that send headers, then nothing until the client leaves',
    FRACTION,
  ),
  spec(
    'coldStartMs',
    '<ms>',
    'number',
    'extra delay for the first request of a cold server',
    NON_NEGATIVE,
  ),
  spec(
    'coldIdleMs',
    '<ms>',
    'number',
    'idle time after which the server is cold again',
    NON_NEGATIVE,
  ),
  spec('fingerprint', '<fp>', 'string', 'system_fingerprint to return (default none)', {
    optional: true,
  }),
  spec(
    'maxModelLen',
    '<tokens>',
    'integer',
    'context length: longer prompts get 400 (default none)',
    {
      min: 1,
      max: 100_000_000,
      optional: true,
    },
  ),
  spec(
    'apiKey',
    '<key>',
    'string',
    'require Authorization: Bearer <key> on /v1 paths (default none)',
    {
      optional: true,
    },
  ),
  spec(
    'engine',
    '<kind>',
    'string',
    `whose load reports to imitate: ${SIM_ENGINE_KINDS.join(' or ')} (/metrics names, ORCA header)`,
    { choices: SIM_ENGINE_KINDS },
  ),
  spec(
    'keepAliveMs',
    '<ms>',
    'integer',
    'idle keep-alive connections close after this many wall-clock ms (not divided by speed)',
    { min: 1, max: 2_147_483_647 },
  ),
  spec(
    'tokensPerChunk',
    '<n>',
    'integer',
    'tokens per streamed chunk after the first (more: fewer, larger chunks)',
    { min: 1, max: 100_000 },
  ),
  spec('tlsCert', '<file>', 'string', 'serve https with this PEM certificate (with --tls-key)', {
    optional: true,
    runtime: false,
  }),
  spec('tlsKey', '<file>', 'string', 'PEM private key of --tls-cert', {
    optional: true,
    runtime: false,
  }),
  spec(
    'loras',
    '<name[,name...]>',
    'string',
    'LoRA adapters it can serve, comma-separated (parent: --model); default none',
    { optional: true },
  ),
  spec('maxLoras', '<n>', 'integer', 'LoRA adapters resident at once, LRU (vLLM --max-loras)', {
    min: 1,
    max: 100_000,
  }),
  spec(
    'loraLoadMs',
    '<ms>',
    'number',
    'cost of loading a LoRA adapter that is not resident (before the prefill)',
    NON_NEGATIVE,
  ),
  spec(
    'allowRuntimeLoraUpdating',
    '',
    'boolean',
    'serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM: VLLM_ALLOW_RUNTIME_LORA_UPDATING)',
  ),
  spec('speed', '<factor>', 'number', 'time compression: every delay is divided by this', POSITIVE),
  spec('seed', '<n>', 'integer', 'seed for fault draws and generated text', {
    min: 0,
    max: 4294967295,
  }),
]);

const SPEC_BY_KEY: ReadonlyMap<string, SimOptionSpec> = new Map(
  SIM_OPTION_SPECS.map((s) => [s.key, s]),
);

/** Thrown for an invalid option; `field` names the offending option. */
export class SimOptionError extends Error {
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.name = 'SimOptionError';
    this.field = field;
  }
}

export function simOptionSpec(key: string): SimOptionSpec | undefined {
  return SPEC_BY_KEY.get(key);
}

/** Why `value` is not acceptable for `s`, or undefined when it is. */
function problem(s: SimOptionSpec, value: unknown): string | undefined {
  if (value === undefined || value === null) {
    return s.optional ? undefined : `${s.key} must be set`;
  }
  if (s.type === 'boolean') {
    return typeof value === 'boolean' ? undefined : `${s.key} must be true or false`;
  }
  if (s.type === 'string') {
    if (typeof value !== 'string') return `${s.key} must be a string`;
    if (value.length === 0 && s.key === 'host') return 'host must not be empty';
    if (s.key === 'loras') return lorasProblem(value);
    if (s.choices !== undefined && !s.choices.includes(value)) {
      return `${s.key} must be one of ${s.choices.join(', ')}`;
    }
    return undefined;
  }
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return `${s.key} must be a finite number`;
  }
  if (s.type === 'integer' && !Number.isInteger(value)) return `${s.key} must be an integer`;
  if (s.min !== undefined) {
    if (s.minExclusive === true ? value <= s.min : value < s.min) {
      return `${s.key} must be ${s.minExclusive === true ? '>' : '>='} ${s.min}`;
    }
  }
  if (s.max !== undefined && value > s.max) return `${s.key} must be <= ${s.max}`;
  return undefined;
}

/** Why a `loras` list is not acceptable: an empty name, a duplicate. */
function lorasProblem(value: string): string | undefined {
  const names = value.split(',').map((n) => n.trim());
  if (names.some((n) => n === '')) return 'loras must be a comma-separated list of adapter names';
  const dup = names.find((n, i) => names.indexOf(n) !== i);
  return dup === undefined ? undefined : `loras names ${dup} twice`;
}

/** The adapter names of a `loras` option, in order. */
export function loraNames(loras: string | undefined): string[] {
  return loras === undefined ? [] : loras.split(',').map((n) => n.trim());
}

export type PatchCheck =
  { ok: true; patch: Partial<SimOptions> } | { ok: false; field: string; message: string };

/**
 * Validate a (JSON) patch of options. Unknown keys, wrong types and out-of-range values are
 * rejected, naming the field. `null` unsets an optional option. With `runtime: true`, options that
 * cannot change while running (`port`, `host`) are rejected too.
 */
export function checkSimOptionsPatch(patch: unknown, mode: { runtime: boolean }): PatchCheck {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) {
    return { ok: false, field: '(body)', message: 'the options patch must be a JSON object' };
  }
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(patch)) {
    const s = SPEC_BY_KEY.get(key);
    if (s === undefined) return { ok: false, field: key, message: `unknown option ${key}` };
    if (mode.runtime && !s.runtime) {
      return { ok: false, field: key, message: `${key} cannot be changed at run time` };
    }
    const why = problem(s, value);
    if (why !== undefined) return { ok: false, field: key, message: why };
    out[key] = value ?? undefined;
  }
  const patchOut: Partial<SimOptions> = out;
  return { ok: true, patch: patchOut };
}

/** Defaults overlaid with `partial`, validated. Throws `SimOptionError`. */
export function resolveSimOptions(partial: Partial<SimOptions> = {}): SimOptions {
  const defined = Object.fromEntries(Object.entries(partial).filter(([, v]) => v !== undefined));
  const checked = checkSimOptionsPatch(defined, { runtime: false });
  if (!checked.ok) throw new SimOptionError(checked.field, checked.message);
  const options = { ...DEFAULT_SIM_OPTIONS, ...checked.patch };
  if ((options.tlsCert === undefined) !== (options.tlsKey === undefined)) {
    const missing = options.tlsCert === undefined ? 'tlsCert' : 'tlsKey';
    throw new SimOptionError(missing, 'tlsCert and tlsKey go together: set both to serve https');
  }
  return options;
}

/**
 * Parse one option from its command-line string (for commander's `argParser`, environment
 * variables, ...). Throws `SimOptionError` naming the option.
 */
export function parseSimOptionValue(key: SimOptionKey, raw: string): number | string | boolean {
  const s = SPEC_BY_KEY.get(key);
  if (s === undefined) throw new SimOptionError(key, `unknown option ${key}`);
  if (s.type === 'boolean') {
    if (raw === 'true' || raw === 'True' || raw === '1') return true;
    if (raw === 'false' || raw === 'False' || raw === '0') return false;
    throw new SimOptionError(key, `${key} must be true or false (got ${JSON.stringify(raw)})`);
  }
  if (s.type === 'string') {
    const why = problem(s, raw);
    if (why !== undefined) throw new SimOptionError(key, why);
    return raw;
  }
  const text = raw.trim();
  const value = text === '' ? Number.NaN : Number(text);
  const why = problem(s, value);
  if (why !== undefined) throw new SimOptionError(key, `${why} (got ${JSON.stringify(raw)})`);
  return value;
}

/**
 * How the API key shows outside the process (the log, `GET /admin/config`): `[set]` or null,
 * never the key itself.
 */
export function shownApiKey(apiKey: string | undefined): '[set]' | null {
  return apiKey === undefined ? null : '[set]';
}
