/**
 * Semantic rules of the InferencePool API: what a single field's schema cannot say.
 *
 * Each rule is written once, here, in two languages that must agree:
 * - `rule` (and `messageExpression`) in CEL: the schema puts it under `x-kubernetes-validations`,
 *   so the API server rejects the resource at `kubectl apply` time;
 * - `check` in TypeScript: `validatePool` runs it on a standalone pool file.
 * Both report the same `message` at the same path (the path of the schema node that carries the
 * rule, plus `fieldPath`), so a pool file and a resource get identical errors.
 *
 * The TypeScript twins run on documents that may be invalid elsewhere: they only look at what is
 * there, and leave type errors to the schema.
 */
import { Kind, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { DURATION_MIN_LENGTH, DURATION_PATTERN, parseDuration } from './duration.ts';
import { type PoolError, isRecord, isSet, joinPath } from './path.ts';

/** One entry of `x-kubernetes-validations`, exactly as it goes into the CRD. */
export interface CelValidation {
  rule: string;
  message: string;
  messageExpression?: string;
  /** Relative JSON path of the field the error is reported at, e.g. `.apiKeySecretRef`. */
  fieldPath?: string;
}

/** A CEL validation and its TypeScript twin. */
export interface SemanticRule extends CelValidation {
  /**
   * Returns undefined when `self` satisfies the rule, otherwise the error message: `message`,
   * or what `messageExpression` evaluates to. `self` has the node's JSON type (object or list);
   * its fields are unchecked.
   */
  check(self: unknown): string | undefined;
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the CEL text and the TypeScript twin
// ---------------------------------------------------------------------------------------------

/** CEL: `x` (a string field of `self`) is a valid duration, so `duration(x)` cannot fail. */
function celValidDuration(x: string): string {
  return `(size(${x}) >= ${DURATION_MIN_LENGTH} && ${x}.matches('${DURATION_PATTERN}'))`;
}

/**
 * URLs that do not carry a key in clear over the network: https, or http to the loopback
 * interface of the pod itself. Plain prefixes rather than a regular expression: the API server
 * estimates the cost of a regex over up to 64 URLs of 2048 characters as too high, and prefixes
 * mean exactly the same thing in CEL and TypeScript.
 */
const SAFE_URL_PREFIXES = [
  'https://',
  'http://localhost:',
  'http://localhost/',
  'http://127.0.0.1:',
  'http://127.0.0.1/',
  'http://[::1]:',
  'http://[::1]/',
];
const SAFE_URLS = ['http://localhost', 'http://127.0.0.1', 'http://[::1]'];

function celSafeUrl(u: string): string {
  const tests = [
    ...SAFE_URL_PREFIXES.map((p) => `${u}.startsWith('${p}')`),
    ...SAFE_URLS.map((e) => `${u} == '${e}'`),
  ];
  return `(${tests.join(' || ')})`;
}

function isSafeUrl(u: unknown): boolean {
  if (typeof u !== 'string') return true; // a type error, reported by the schema
  return SAFE_URL_PREFIXES.some((p) => u.startsWith(p)) || SAFE_URLS.includes(u);
}

function record(self: unknown): Record<string, unknown> {
  return isRecord(self) ? self : {};
}

// ---------------------------------------------------------------------------------------------
// Rules on one backend (`spec.backends[i]`)
// ---------------------------------------------------------------------------------------------

function sourceCount(b: Record<string, unknown>): number {
  return ['service', 'inferencePoolRef', 'url', 'urls'].filter((k) => isSet(b, k)).length;
}

export const BACKEND_SINGLE_SOURCE: SemanticRule = {
  rule:
    '(has(self.service) ? 1 : 0) + (has(self.inferencePoolRef) ? 1 : 0) + ' +
    '(has(self.url) ? 1 : 0) + (has(self.urls) ? 1 : 0) <= 1',
  message:
    'a backend takes exactly one of service, inferencePoolRef, url or urls, and this one sets more than one',
  check(self) {
    return sourceCount(record(self)) <= 1 ? undefined : this.message;
  },
};

export const BACKEND_HAS_SOURCE: SemanticRule = {
  rule: 'has(self.service) || has(self.inferencePoolRef) || has(self.url) || has(self.urls)',
  message: 'a backend needs one of service, inferencePoolRef, url or urls, and this one sets none',
  check(self) {
    return sourceCount(record(self)) >= 1 ? undefined : this.message;
  },
};

export const BACKEND_SINGLE_KEY_SOURCE: SemanticRule = {
  rule: '!has(self.apiKeySecretRef) || !has(self.apiKeyEnv)',
  message: 'apiKeySecretRef and apiKeyEnv are two sources for the same key: set only one',
  check(self) {
    const b = record(self);
    return isSet(b, 'apiKeySecretRef') && isSet(b, 'apiKeyEnv') ? this.message : undefined;
  },
};

/** The backend's url and urls, as they are (unchecked). */
function urlsOf(b: Record<string, unknown>): unknown[] {
  const urls = isSet(b, 'url') ? [b['url']] : [];
  return Array.isArray(b['urls']) ? [...urls, ...(b['urls'] as unknown[])] : urls;
}

function insecureAllowed(b: Record<string, unknown>): boolean {
  return b['allowInsecureApiKey'] === true;
}

export const SERVICE_KEY_NEEDS_OPT_IN: SemanticRule = {
  rule:
    '!(has(self.service) || has(self.inferencePoolRef)) || !has(self.apiKeySecretRef) || ' +
    '(has(self.allowInsecureApiKey) && self.allowInsecureApiKey)',
  message:
    'a service or inferencePoolRef backend is called over plain http, so the key of ' +
    'apiKeySecretRef would cross the network in clear: set allowInsecureApiKey: true to accept that',
  fieldPath: '.apiKeySecretRef',
  check(self) {
    const b = record(self);
    return (isSet(b, 'service') || isSet(b, 'inferencePoolRef')) &&
      isSet(b, 'apiKeySecretRef') &&
      !insecureAllowed(b)
      ? this.message
      : undefined;
  },
};

export const HTTP_URL_KEY_NEEDS_OPT_IN: SemanticRule = {
  rule:
    '!(has(self.apiKeySecretRef) || has(self.apiKeyEnv)) || ' +
    '(has(self.allowInsecureApiKey) && self.allowInsecureApiKey) || ' +
    `((!has(self.url) || ${celSafeUrl('self.url')}) && ` +
    `(!has(self.urls) || self.urls.all(u, ${celSafeUrl('u')})))`,
  message:
    'an http:// url other than localhost, 127.0.0.1 or [::1] would carry the API key in clear: ' +
    'use https, or set allowInsecureApiKey: true to accept that',
  check(self) {
    const b = record(self);
    if (!(isSet(b, 'apiKeySecretRef') || isSet(b, 'apiKeyEnv')) || insecureAllowed(b)) {
      return undefined;
    }
    return urlsOf(b).every(isSafeUrl) ? undefined : this.message;
  },
};

/** tls (certificate checks) means something only where a connection speaks https. */
export const TLS_NEEDS_HTTPS: SemanticRule = {
  rule:
    "!has(self.tls) || has(self.service) || (has(self.url) && self.url.startsWith('https://')) || " +
    "(has(self.urls) && self.urls.all(u, u.startsWith('https://')))",
  message:
    'tls checks the certificates of https endpoints, and this backend has an http:// url or ' +
    'is an inferencePoolRef (plain http): use https:// urls or remove tls',
  fieldPath: '.tls',
  check(self) {
    const b = record(self);
    if (!isSet(b, 'tls') || isSet(b, 'service')) return undefined;
    const urls = urlsOf(b);
    return urls.length > 0 && urls.every((u) => typeof u !== 'string' || u.startsWith('https://'))
      ? undefined
      : this.message;
  },
};

/** The rules on each item of `spec.backends`, in the order they are reported. */
export const BACKEND_RULES: readonly SemanticRule[] = [
  BACKEND_SINGLE_SOURCE,
  BACKEND_HAS_SOURCE,
  BACKEND_SINGLE_KEY_SOURCE,
  SERVICE_KEY_NEEDS_OPT_IN,
  HTTP_URL_KEY_NEEDS_OPT_IN,
  TLS_NEEDS_HTTPS,
];

// ---------------------------------------------------------------------------------------------
// Rules on a backend's tls (`spec.backends[i].tls`)
// ---------------------------------------------------------------------------------------------

export const TLS_SINGLE_CA_SOURCE: SemanticRule = {
  rule: '!has(self.caBundle) || !has(self.caSecretRef)',
  message: 'caBundle and caSecretRef are two sources for the same CAs: set only one',
  check(self) {
    const t = record(self);
    return isSet(t, 'caBundle') && isSet(t, 'caSecretRef') ? this.message : undefined;
  },
};

export const TLS_SKIP_VERIFY_WITHOUT_CA: SemanticRule = {
  rule:
    '!(has(self.insecureSkipVerify) && self.insecureSkipVerify) || ' +
    '(!has(self.caBundle) && !has(self.caSecretRef))',
  message:
    'insecureSkipVerify accepts any certificate, so the CAs of caBundle or caSecretRef would be ' +
    'ignored: set only one of them',
  fieldPath: '.insecureSkipVerify',
  check(self) {
    const t = record(self);
    return t['insecureSkipVerify'] === true && (isSet(t, 'caBundle') || isSet(t, 'caSecretRef'))
      ? this.message
      : undefined;
  },
};

export const TLS_RULES: readonly SemanticRule[] = [
  TLS_SINGLE_CA_SOURCE,
  TLS_SKIP_VERIFY_WITHOUT_CA,
];

// ---------------------------------------------------------------------------------------------
// Rules on the backend list (`spec.backends`)
// ---------------------------------------------------------------------------------------------

export const UNIQUE_BACKEND_NAMES: SemanticRule = {
  rule: 'self.all(b, self.exists_one(c, c.name == b.name))',
  message: 'backend names must be unique',
  // Names, then the first one that occurs twice. (Filtering the backends with exists_one inside
  // is estimated by the API server at over 100 times the cost limit; this is within it.)
  messageExpression:
    `'backend names must be unique: "' + ` +
    `self.map(b, b.name).filter(n, self.filter(c, c.name == n).size() > 1)[0] + ` +
    `'" is used more than once'`,
  check(self) {
    if (!Array.isArray(self)) return undefined;
    const names = self.map((b) => (isRecord(b) ? b['name'] : undefined));
    const counts = new Map<unknown, number>();
    for (const n of names) if (typeof n === 'string') counts.set(n, (counts.get(n) ?? 0) + 1);
    const first = names.find((n): n is string => typeof n === 'string' && (counts.get(n) ?? 0) > 1);
    return first === undefined
      ? undefined
      : `backend names must be unique: "${first}" is used more than once`;
  },
};

export const BACKENDS_RULES: readonly SemanticRule[] = [UNIQUE_BACKEND_NAMES];

// ---------------------------------------------------------------------------------------------
// Models, aliases and weights (`spec.aliases`, `spec` as a whole)
// ---------------------------------------------------------------------------------------------

/** Most names in `spec.models` and in each `spec.backends[].models`. */
export const MAX_MODELS = 128;
/** Most entries of `spec.aliases`: the chain rule compares every pair, within the CEL cost limit. */
export const MAX_ALIASES = 64;
/** Largest `spec.backends[].weight`: room for a split of 0.0001 %, far from int64 trouble. */
export const MAX_WEIGHT = 1_000_000;

function aliasList(self: unknown): Record<string, unknown>[] {
  return Array.isArray(self) ? self.filter(isRecord) : [];
}

/**
 * An alias points at a served model, not at another alias (itself included): one lookup, no
 * chains or cycles to follow in the sidecar, and a pool reads the same whatever the list order.
 */
export const ALIAS_NO_CHAINS: SemanticRule = {
  rule: 'self.all(a, !self.exists(b, b.name == a.model))',
  message: 'an alias must point at a served model, not at another alias',
  // The first alias that another alias points at. (Naming the pointing alias too needs a filter
  // of the aliases inside the message, which the API server estimates at over 100 times the cost
  // limit; the target's name is enough to find the line.)
  messageExpression:
    `'an alias must point at a served model, not at another alias: "' + ` +
    `self.map(a, a.model).filter(m, self.exists(b, b.name == m))[0] + ` +
    `'" is an alias and the model of an alias'`,
  check(self) {
    const aliases = aliasList(self);
    const names = new Set(aliases.map((a) => a['name']).filter((n) => typeof n === 'string'));
    const chained = aliases.find((a) => typeof a['model'] === 'string' && names.has(a['model']));
    if (chained === undefined) return undefined;
    return `${this.message}: "${String(chained['model'])}" is an alias and the model of an alias`;
  },
};

export const ALIASES_RULES: readonly SemanticRule[] = [ALIAS_NO_CHAINS];

function stringList(v: unknown): string[] | undefined {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : undefined;
}

export const ALIAS_NAME_NOT_A_MODEL: SemanticRule = {
  rule: '!has(self.aliases) || !has(self.models) || self.aliases.all(a, !(a.name in self.models))',
  message:
    'an alias name must not be one of spec.models: a request for it would be rewritten to ' +
    'another model, so the served model of that name could never be reached',
  fieldPath: '.aliases',
  check(self) {
    const spec = record(self);
    const models = stringList(spec['models']);
    if (models === undefined) return undefined;
    return aliasList(spec['aliases']).some(
      (a) => typeof a['name'] === 'string' && models.includes(a['name']),
    )
      ? this.message
      : undefined;
  },
};

export const ALIAS_MODEL_IN_MODELS: SemanticRule = {
  rule:
    '!has(self.aliases) || !has(self.models) || size(self.models) == 0 || ' +
    'self.aliases.all(a, a.model in self.models)',
  message:
    'with spec.models set, every alias must point at one of spec.models: the pool refuses ' +
    'any other model, so the alias would only ever answer 404',
  fieldPath: '.aliases',
  check(self) {
    const spec = record(self);
    const models = stringList(spec['models']);
    if (models === undefined || models.length === 0) return undefined;
    return aliasList(spec['aliases']).some(
      (a) => typeof a['model'] === 'string' && !models.includes(a['model']),
    )
      ? this.message
      : undefined;
  },
};

function backendList(spec: Record<string, unknown>): Record<string, unknown>[] {
  return Array.isArray(spec['backends']) ? spec['backends'].filter(isRecord) : [];
}

function isFailover(spec: Record<string, unknown>): boolean {
  return spec['mode'] === 'Failover';
}

/**
 * In Balance mode the whole pool is one tier (the policy groups by tier only in Failover mode):
 * a weight on some backends but not others would leave the others' share undefined.
 */
export const WEIGHTS_ALL_OR_NONE: SemanticRule = {
  rule:
    "(has(self.mode) && self.mode == 'Failover') || " +
    'self.backends.all(b, has(b.weight)) || self.backends.all(b, !has(b.weight))',
  message: 'in Balance mode the backends share one split: set weight on every backend or on none',
  fieldPath: '.backends',
  check(self) {
    const spec = record(self);
    if (isFailover(spec)) return undefined;
    const weighted = backendList(spec).map((b) => isSet(b, 'weight'));
    return weighted.every((w) => w) || weighted.every((w) => !w) ? undefined : this.message;
  },
};

/** Weights are at least 0, so a positive sum means one positive weight. */
export const WEIGHTS_POSITIVE_SUM: SemanticRule = {
  rule:
    "(has(self.mode) && self.mode == 'Failover') || !self.backends.exists(b, has(b.weight)) || " +
    'self.backends.exists(b, has(b.weight) && b.weight > 0)',
  message: 'the weights are all 0, so no backend would get any traffic: give one a weight above 0',
  fieldPath: '.backends',
  check(self) {
    const spec = record(self);
    if (isFailover(spec)) return undefined;
    const weights = backendList(spec)
      .map((b) => b['weight'])
      .filter((w): w is number => typeof w === 'number');
    return weights.length === 0 || weights.some((w) => w > 0) ? undefined : this.message;
  },
};

/**
 * In Failover mode each backend is a tier of its own, so its weight is its tier's whole sum: 0
 * would be a tier that takes no traffic, which is what leaving the backend out says.
 */
export const FAILOVER_WEIGHT_POSITIVE: SemanticRule = {
  rule:
    "!has(self.mode) || self.mode != 'Failover' || " +
    'self.backends.all(b, !has(b.weight) || b.weight > 0)',
  message:
    'in Failover mode each backend is a tier of its own, so a weight of 0 leaves its tier ' +
    'without traffic: remove the weight or the backend',
  fieldPath: '.backends',
  check(self) {
    const spec = record(self);
    if (!isFailover(spec)) return undefined;
    return backendList(spec).some((b) => b['weight'] === 0) ? this.message : undefined;
  },
};

export const SPEC_RULES: readonly SemanticRule[] = [
  ALIAS_NAME_NOT_A_MODEL,
  ALIAS_MODEL_IN_MODELS,
  WEIGHTS_ALL_OR_NONE,
  WEIGHTS_POSITIVE_SUM,
  FAILOVER_WEIGHT_POSITIVE,
];

/**
 * What the CEL rules cannot afford to say (every alias against every model of every backend is
 * beyond the API server's cost limit), checked by `validatePool` for a pool file and by the
 * controller for a resource: an alias name that a backend also serves would hide that model.
 * Errors name the alias's field.
 */
export function checkAliasesAgainstBackends(spec: unknown, path: string): PoolError[] {
  const s = record(spec);
  const served = new Map<string, string>();
  const backends = Array.isArray(s['backends']) ? (s['backends'] as unknown[]) : [];
  backends.forEach((b, i) => {
    for (const m of stringList(record(b)['models']) ?? []) {
      if (!served.has(m))
        served.set(m, joinPath(joinPath(joinPath(path, 'backends'), i), 'models'));
    }
  });
  const out: PoolError[] = [];
  const aliases = Array.isArray(s['aliases']) ? (s['aliases'] as unknown[]) : [];
  aliases.forEach((a, i) => {
    const name = record(a)['name'];
    if (typeof name !== 'string') return;
    const where = served.get(name);
    if (where === undefined) return;
    out.push({
      path: joinPath(joinPath(joinPath(path, 'aliases'), i), 'name'),
      message:
        `"${name}" is a model a backend serves (${where}): as an alias it would be rewritten ` +
        'and that model never reached; give the alias another name',
    });
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Rules on `spec.health`
// ---------------------------------------------------------------------------------------------

export const MAX_OPEN_FOR_AT_LEAST_OPEN_FOR: SemanticRule = {
  rule:
    '!has(self.openFor) || !has(self.maxOpenFor) || ' +
    `!${celValidDuration('self.openFor')} || !${celValidDuration('self.maxOpenFor')} || ` +
    'duration(self.maxOpenFor) >= duration(self.openFor)',
  message:
    'maxOpenFor must be at least openFor: a breaker opens for openFor first, then twice as ' +
    'long each time it opens again, up to maxOpenFor',
  fieldPath: '.maxOpenFor',
  check(self) {
    const h = record(self);
    const open = typeof h['openFor'] === 'string' ? parseDuration(h['openFor']) : undefined;
    const max = typeof h['maxOpenFor'] === 'string' ? parseDuration(h['maxOpenFor']) : undefined;
    if (open?.ok !== true || max?.ok !== true) return undefined;
    return max.ms >= open.ms ? undefined : this.message;
  },
};

export const HEALTH_RULES: readonly SemanticRule[] = [MAX_OPEN_FOR_AT_LEAST_OPEN_FOR];

// ---------------------------------------------------------------------------------------------
// Rules on `spec.flowControl`
// ---------------------------------------------------------------------------------------------

/** Most entries of `spec.flowControl.budgets`. */
export const MAX_BUDGETS = 256;

function workloadSourceCount(w: Record<string, unknown>): number {
  return ['serviceAccount', 'podLabel', 'header'].filter((k) => isSet(w, k)).length;
}

export const WORKLOAD_SINGLE_SOURCE: SemanticRule = {
  rule:
    '(has(self.serviceAccount) ? 1 : 0) + (has(self.podLabel) ? 1 : 0) + ' +
    '(has(self.header) ? 1 : 0) <= 1',
  message:
    'a workload comes from exactly one of serviceAccount, podLabel or header, and this one sets ' +
    'more than one',
  check(self) {
    return workloadSourceCount(record(self)) <= 1 ? undefined : this.message;
  },
};

export const WORKLOAD_HAS_SOURCE: SemanticRule = {
  rule: 'has(self.serviceAccount) || has(self.podLabel) || has(self.header)',
  message:
    'a workload needs one of serviceAccount: {}, podLabel: <label key> or header: <header ' +
    'name>, and this one sets none',
  check(self) {
    return workloadSourceCount(record(self)) >= 1 ? undefined : this.message;
  },
};

export const WORKLOAD_RULES: readonly SemanticRule[] = [
  WORKLOAD_SINGLE_SOURCE,
  WORKLOAD_HAS_SOURCE,
];

export const BUDGET_HAS_RATE: SemanticRule = {
  rule: 'has(self.requestsPerMinute) || has(self.tokensPerMinute)',
  message: 'a budget without a rate limits nothing: set requestsPerMinute or tokensPerMinute',
  check(self) {
    const b = record(self);
    return isSet(b, 'requestsPerMinute') || isSet(b, 'tokensPerMinute') ? undefined : this.message;
  },
};

export const BUDGET_RULES: readonly SemanticRule[] = [BUDGET_HAS_RATE];

function budgetList(self: unknown): Record<string, unknown>[] {
  return Array.isArray(self) ? self.filter(isRecord) : [];
}

export const BUDGETS_ONE_POOL_WIDE: SemanticRule = {
  rule: 'self.filter(b, !has(b.workload)).size() <= 1',
  message:
    'at most one budget may leave out workload (the pool-wide budget): merge them into one, ' +
    'or give each a workload',
  check(self) {
    return budgetList(self).filter((b) => !isSet(b, 'workload')).length <= 1
      ? undefined
      : this.message;
  },
};

export const BUDGETS_UNIQUE_WORKLOADS: SemanticRule = {
  rule: 'self.all(b, !has(b.workload) || self.exists_one(c, has(c.workload) && c.workload == b.workload))',
  message: 'each workload has at most one budget: merge the entries of the same workload',
  messageExpression:
    `'each workload has at most one budget: merge the entries of the same workload: "' + ` +
    `self.filter(b, has(b.workload)).map(b, b.workload)` +
    `.filter(w, self.filter(c, has(c.workload) && c.workload == w).size() > 1)[0] + ` +
    `'" has more than one'`,
  check(self) {
    const counts = new Map<string, number>();
    const workloads = budgetList(self)
      .map((b) => b['workload'])
      .filter((w): w is string => typeof w === 'string');
    for (const w of workloads) counts.set(w, (counts.get(w) ?? 0) + 1);
    const first = workloads.find((w) => (counts.get(w) ?? 0) > 1);
    return first === undefined ? undefined : `${this.message}: "${first}" has more than one`;
  },
};

export const BUDGETS_RULES: readonly SemanticRule[] = [
  BUDGETS_ONE_POOL_WIDE,
  BUDGETS_UNIQUE_WORKLOADS,
];

export const BUDGET_WORKLOAD_NEEDS_SOURCE: SemanticRule = {
  rule: 'has(self.workload) || !has(self.budgets) || self.budgets.all(b, !has(b.workload))',
  message:
    "a budget with a workload needs flowControl.workload, which says where a request's " +
    'workload comes from (serviceAccount, podLabel or header): set it, or remove the ' +
    'workload budgets',
  fieldPath: '.budgets',
  check(self) {
    const f = record(self);
    if (isSet(f, 'workload')) return undefined;
    return budgetList(f['budgets']).some((b) => isSet(b, 'workload')) ? this.message : undefined;
  },
};

export const FLOW_CONTROL_RULES: readonly SemanticRule[] = [BUDGET_WORKLOAD_NEEDS_SOURCE];

/** Every rule, for looking up the TypeScript twin of a CEL rule found in the schema. */
export const ALL_RULES: readonly SemanticRule[] = [
  ...BACKEND_RULES,
  ...BACKENDS_RULES,
  ...TLS_RULES,
  ...HEALTH_RULES,
  ...ALIASES_RULES,
  ...SPEC_RULES,
  ...WORKLOAD_RULES,
  ...BUDGET_RULES,
  ...BUDGETS_RULES,
  ...FLOW_CONTROL_RULES,
];

/** The CEL half of rules, as the schema stores it under `x-kubernetes-validations`. */
export function celValidations(rules: readonly SemanticRule[]): CelValidation[] {
  return rules.map(({ rule, message, messageExpression, fieldPath }) => ({
    rule,
    message,
    ...(messageExpression === undefined ? {} : { messageExpression }),
    ...(fieldPath === undefined ? {} : { fieldPath }),
  }));
}

// ---------------------------------------------------------------------------------------------
// Formats: deeper string checks than a pattern can do (TypeScript only)
// ---------------------------------------------------------------------------------------------

export const URL_HELP = 'must be an http or https URL like https://api.example.com/v1';

/** Why `text` is not a usable backend URL, or undefined when it is one. */
export function checkUrl(text: string): string | undefined {
  const url = URL.parse(text);
  if (url === null) return `${URL_HELP}: it does not parse as a URL`;
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `${URL_HELP}: the scheme must be http or https`;
  }
  if (url.username !== '' || url.password !== '') {
    return `${URL_HELP}: put no user or password into it (use apiKeySecretRef or apiKeyEnv)`;
  }
  if (url.search !== '' || url.hash !== '' || /[?#]/.test(text)) {
    return `${URL_HELP}: it is a base URL, without ?query or #fragment`;
  }
  if (url.hostname === '') return `${URL_HELP}: it has no host`;
  return undefined;
}

const PEM_BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?-----END \1-----/g;

/**
 * Why `text` is not a PEM bundle of certificates, or undefined when it is one: at least one
 * CERTIFICATE block, and no other kind (a private key pasted by mistake must not travel on to
 * every sidecar). The blocks' contents are parsed by the sidecar, which fails the endpoint's
 * attempts with the reason if they do not parse.
 */
export function checkPemCertificates(text: string): string | undefined {
  const kinds = [...text.matchAll(PEM_BLOCK)].map((m) => m[1]);
  if (kinds.length === 0) {
    return 'must hold PEM certificates: one or more -----BEGIN CERTIFICATE----- blocks';
  }
  const other = kinds.find((k) => k !== 'CERTIFICATE');
  if (other !== undefined) {
    return `must hold only certificates, and it holds a ${other} block: never put a key here`;
  }
  return undefined;
}

/**
 * Checks for string nodes marked with `x-switchyard-format`. They refine the node's `pattern`:
 * the reason says what exactly is wrong.
 */
export const FORMATS: Readonly<Record<string, (text: string) => string | undefined>> = {
  duration: (text) => {
    const parsed = parseDuration(text);
    return parsed.ok ? undefined : parsed.reason;
  },
  url: checkUrl,
  pem: checkPemCertificates,
};

// ---------------------------------------------------------------------------------------------
// The walker
// ---------------------------------------------------------------------------------------------

interface SchemaNode {
  [Kind]?: string;
  type?: string;
  properties?: Record<string, SchemaNode>;
  items?: SchemaNode;
  'x-kubernetes-validations'?: CelValidation[];
  'x-kubernetes-list-type'?: string;
  'x-kubernetes-list-map-keys'?: string[];
  'x-switchyard-format'?: string;
}

/**
 * Items of an `x-kubernetes-list-type: map` list that repeat the keys of an earlier one: the API
 * server refuses them ("Duplicate value") at the later item's path, and so does a pool file.
 */
function duplicateMapKeys(node: SchemaNode, list: unknown[], path: string): PoolError[] {
  const keys = node['x-kubernetes-list-map-keys'] ?? [];
  const seen = new Map<string, number>();
  const out: PoolError[] = [];
  list.forEach((item, i) => {
    if (!isRecord(item)) return;
    const values = keys.map((k) => item[k]);
    if (values.some((v) => typeof v !== 'string' && typeof v !== 'number')) return;
    const key = JSON.stringify(values);
    const first = seen.get(key);
    if (first === undefined) {
      seen.set(key, i);
      return;
    }
    const what = keys.map((k, j) => `${k} ${JSON.stringify(values[j])}`).join(', ');
    out.push({
      path: joinPath(path, i),
      message: `duplicate ${what}: already at ${joinPath(path, first)}`,
    });
  });
  return out;
}

function ruleFor(v: CelValidation): SemanticRule {
  const rule = ALL_RULES.find((r) => r.rule === v.rule);
  // Not reachable with the shipped schema: semantic.test.ts checks that every rule has a twin.
  if (rule === undefined) throw new Error(`no TypeScript twin for the CEL rule ${v.rule}`);
  return rule;
}

function fieldPathJoin(path: string, fieldPath: string | undefined): string {
  if (fieldPath === undefined) return path;
  return fieldPath
    .split('.')
    .filter((s) => s !== '')
    .reduce(joinPath, path);
}

/**
 * Run every semantic rule of `schema` on `value`: the TypeScript twins of the CEL rules, the
 * uniqueness of `x-kubernetes-list-type: set` lists and the `x-switchyard-format` checks of
 * strings that pass their schema (a string that fails it is reported by the schema check, whose
 * message comes from the same format check). Only looks at what has the right JSON type.
 */
export function checkSemantics(schema: TSchema, value: unknown, path: string): PoolError[] {
  const out: PoolError[] = [];
  visit(schema, value, path, out);
  return out;
}

function visit(node: SchemaNode, value: unknown, path: string, out: PoolError[]): void {
  const isObjectNode = node[Kind] === 'Object';
  const isArrayNode = node[Kind] === 'Array';
  if (isObjectNode && !isRecord(value)) return;
  if (isArrayNode && !Array.isArray(value)) return;
  if (value === undefined || value === null) return;

  const format = node['x-switchyard-format'];
  if (format !== undefined && typeof value === 'string' && Value.Check(node as TSchema, value)) {
    const message = FORMATS[format]?.(value);
    if (message !== undefined) out.push({ path, message });
  }

  for (const v of node['x-kubernetes-validations'] ?? []) {
    const rule = ruleFor(v);
    const message = rule.check(value);
    if (message !== undefined) out.push({ path: fieldPathJoin(path, rule.fieldPath), message });
  }

  if (isArrayNode && Array.isArray(value)) {
    if (node['x-kubernetes-list-type'] === 'set') {
      const seen = new Map<unknown, number>();
      value.forEach((item, i) => {
        if (typeof item !== 'string' && typeof item !== 'number') return;
        const first = seen.get(item);
        if (first === undefined) seen.set(item, i);
        else {
          out.push({
            path: joinPath(path, i),
            message: `duplicate value ${JSON.stringify(item)}: already at ${joinPath(path, first)}`,
          });
        }
      });
    }
    if (node['x-kubernetes-list-type'] === 'map') out.push(...duplicateMapKeys(node, value, path));
    const items = node.items;
    if (items !== undefined) value.forEach((item, i) => visit(items, item, joinPath(path, i), out));
  }

  if (isObjectNode && isRecord(value)) {
    for (const [key, child] of Object.entries(node.properties ?? {})) {
      if (isSet(value, key)) visit(child, value[key], joinPath(path, key), out);
    }
  }
}
