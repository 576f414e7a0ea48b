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
  return ['service', 'url', 'urls'].filter((k) => isSet(b, k)).length;
}

export const BACKEND_SINGLE_SOURCE: SemanticRule = {
  rule: '(has(self.service) ? 1 : 0) + (has(self.url) ? 1 : 0) + (has(self.urls) ? 1 : 0) <= 1',
  message: 'a backend takes exactly one of service, url or urls, and this one sets more than one',
  check(self) {
    return sourceCount(record(self)) <= 1 ? undefined : this.message;
  },
};

export const BACKEND_HAS_SOURCE: SemanticRule = {
  rule: 'has(self.service) || has(self.url) || has(self.urls)',
  message: 'a backend needs one of service, url or urls, and this one sets none',
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
    '!has(self.service) || !has(self.apiKeySecretRef) || ' +
    '(has(self.allowInsecureApiKey) && self.allowInsecureApiKey)',
  message:
    'a service backend is called over plain http, so the key of apiKeySecretRef would cross ' +
    'the network in clear: set allowInsecureApiKey: true to accept that',
  fieldPath: '.apiKeySecretRef',
  check(self) {
    const b = record(self);
    return isSet(b, 'service') && isSet(b, 'apiKeySecretRef') && !insecureAllowed(b)
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
    'tls checks the certificates of https endpoints, and this backend has an http:// url: ' +
    'use https:// urls or remove tls',
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

/** Every rule, for looking up the TypeScript twin of a CEL rule found in the schema. */
export const ALL_RULES: readonly SemanticRule[] = [
  ...BACKEND_RULES,
  ...BACKENDS_RULES,
  ...TLS_RULES,
  ...HEALTH_RULES,
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
  'x-switchyard-format'?: string;
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
    const items = node.items;
    if (items !== undefined) value.forEach((item, i) => visit(items, item, joinPath(path, i), out));
  }

  if (isObjectNode && isRecord(value)) {
    for (const [key, child] of Object.entries(node.properties ?? {})) {
      if (isSet(value, key)) visit(child, value[key], joinPath(path, key), out);
    }
  }
}
