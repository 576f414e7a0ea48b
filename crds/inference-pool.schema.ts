/**
 * The InferencePool API (`switchyard.dev/v1alpha1`): the one source of truth.
 *
 * From these TypeBox schemas come
 * - the CustomResourceDefinition (`crds/crd.ts` renders it, `npm run generate` writes it):
 *   descriptions become `kubectl explain` text, `x-kubernetes-validations` become CEL rules;
 * - the TypeScript types (`Static<>`, below);
 * - the runtime validation of a standalone pool file (`crds/validate.ts`).
 *
 * Kubernetes wants a structural schema: a type on every node, no `$ref`, no `oneOf`, no
 * `additionalProperties: false` (the API server prunes unknown fields instead). The schemas below
 * keep `additionalProperties: false` for the pool-file validator (a typo like `helth` must be an
 * error there); the CRD renderer leaves it out. Two shapes are special:
 * - a port is an integer or a name (`x-kubernetes-int-or-string`): a union here, rendered as the
 *   int-or-string form with both sets of limits on the node itself;
 * - an enum is a union of string literals here, `type: string` with `enum` in the CRD.
 *
 * Fields that have a `default` are not optional in the TypeScript types: `validatePool` returns
 * the pool with every default applied, as the API server stores it. The CRD lists as `required`
 * only the fields without a default.
 *
 * Custom keywords (left out of the CRD): `errorMessage` (what a failed pattern or union means to
 * a person) and `x-switchyard-format` (`duration` or `url`: a deeper check in `semantic.ts`).
 */
import { Type, type Static } from '@sinclair/typebox';
import {
  AFFINITY_LOAD_FACTOR,
  AFFINITY_MAX_EXTRA_IN_FLIGHT,
  AFFINITY_MAX_SLOWDOWN,
  AFFINITY_SLOWDOWN_MIN_MS,
  AFFINITY_SLOWDOWN_MIN_SAMPLES,
  CLIENT_STALL_MS,
  HEALTH_CONSECUTIVE_ERRORS,
  SHEDDABLE_HEADROOM,
} from './policy-defaults.ts';
import { DURATION_MAX_LENGTH, DURATION_MIN_LENGTH, DURATION_PATTERN } from './duration.ts';
import {
  ALIASES_RULES,
  BACKEND_RULES,
  BACKENDS_RULES,
  BUDGET_RULES,
  BUDGETS_RULES,
  FLOW_CONTROL_RULES,
  HEALTH_RULES,
  MAX_ALIASES,
  MAX_BUDGETS,
  MAX_MODELS,
  MAX_WEIGHT,
  SPEC_RULES,
  TLS_RULES,
  WORKLOAD_RULES,
  celValidations,
} from './semantic.ts';

export const GROUP = 'switchyard.dev';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;
/** The resource name in API paths (`/apis/switchyard.dev/v1alpha1/.../inferencepools`). */
export const PLURAL = 'inferencepools';
export const KIND = 'InferencePool';

/**
 * Default of `spec.affinity.maxSlowdown`: the policy's named constant, so the CRD default, the
 * pool-file default and the balancer's fallback are one number.
 */
export { AFFINITY_MAX_SLOWDOWN };

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

const DNS_LABEL = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';
const DNS_1035_LABEL = '^[a-z]([-a-z0-9]*[a-z0-9])?$';
const DNS_SUBDOMAIN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$';
/** IANA service name: lower-case letters, digits and single inner hyphens, at least one letter. */
const PORT_NAME = '^([a-z0-9]+-)*[a-z0-9]*[a-z][a-z0-9]*(-[a-z0-9]+)*$';
const SECRET_KEY = '^[-._a-zA-Z0-9]+$';
const ENV_NAME = '^[A-Za-z_][A-Za-z0-9_]*$';
/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";
/** A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name. */
const LABEL_KEY =
  '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$';
/** The syntax of a backend URL; `checkUrl` in semantic.ts parses it for real. */
const BASE_URL = '^https?://[^\\s/?#@]+(/[^\\s?#]*)?$';

function duration(description: string, defaultValue?: string) {
  return Type.String({
    description,
    pattern: DURATION_PATTERN,
    minLength: DURATION_MIN_LENGTH,
    maxLength: DURATION_MAX_LENGTH,
    'x-switchyard-format': 'duration',
    ...(defaultValue === undefined ? {} : { default: defaultValue }),
  });
}

const DURATION_SYNTAX =
  'A duration: whole numbers with units h, m, s or ms, largest first (500ms, 5s, 10m, 1h30m).';

function url(description: string) {
  return Type.String({
    description,
    pattern: BASE_URL,
    maxLength: 2048,
    'x-switchyard-format': 'url',
    errorMessage:
      'must be an http or https URL like https://api.example.com/v1, with no spaces, user, ' +
      '?query or #fragment',
  });
}

// ---------------------------------------------------------------------------------------------
// spec.backends[]
// ---------------------------------------------------------------------------------------------

export const ServiceRefSchema = Type.Object(
  {
    name: Type.String({
      description:
        'Name of a Service in the pool\'s namespace. Required. A DNS label: lower-case letters, digits and "-", starting with a letter, at most 63 characters.',
      minLength: 1,
      maxLength: 63,
      pattern: DNS_1035_LABEL,
      errorMessage:
        'must be a Service name: lower-case letters, digits and "-", starting with a letter and ending with a letter or digit',
    }),
    port: Type.Union(
      [
        Type.Integer({ minimum: 1, maximum: 65535 }),
        Type.String({ minLength: 1, maxLength: 15, pattern: PORT_NAME }),
      ],
      {
        description:
          'Port of the Service: its number (1 to 65535) or the name of one of its ports (up to 15 lower-case letters, digits and "-", with at least one letter). Required.',
        'x-kubernetes-int-or-string': true,
        errorMessage:
          'must be a port number from 1 to 65535 or a port name (up to 15 lower-case letters, digits and "-", with at least one letter)',
      },
    ),
  },
  {
    description:
      "A Kubernetes Service in the pool's namespace: every ready endpoint of its EndpointSlices becomes an endpoint of this backend, reached over http (https when the Service port's appProtocol or name is https). Needs the controller: a standalone pool file cannot use it.",
    additionalProperties: false,
  },
);

/** The API group of the Gateway API inference extension's InferencePool (GAIE v1). */
export const GAIE_GROUP = 'inference.networking.k8s.io';
export const GAIE_VERSION = 'v1';
export const GAIE_PLURAL = 'inferencepools';

export const InferencePoolRefSchema = Type.Object(
  {
    name: Type.String({
      description:
        "Name of an InferencePool of the Gateway API inference extension (inference.networking.k8s.io/v1) in this pool's namespace. Required. A DNS subdomain, at most 253 characters.",
      minLength: 1,
      maxLength: 253,
      pattern: DNS_SUBDOMAIN,
      errorMessage:
        'must be an InferencePool name: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit',
    }),
  },
  {
    description:
      "A Gateway API inference extension pool (inference.networking.k8s.io/v1 InferencePool) in the pool's namespace: every ready pod its spec.selector matches becomes an endpoint on each of its spec.targetPorts, reached over plain http and followed live. Its endpoint picker is not used: this pool's own policy (failover order, cost, breakers, affinity) picks among its pods. Needs the controller: a standalone pool file cannot use it.",
    additionalProperties: false,
  },
);

/** A reference to one key of a Secret in the pool's namespace; `what` the value is. */
function secretKeyRef(what: string, keyExample: string, description: string) {
  return Type.Object(
    {
      name: Type.String({
        description:
          "Name of a Secret in the pool's namespace. Required. A DNS subdomain, at most 253 characters.",
        minLength: 1,
        maxLength: 253,
        pattern: DNS_SUBDOMAIN,
        errorMessage:
          'must be a Secret name: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit',
      }),
      key: Type.String({
        description: `Key within the Secret whose value is ${what}${keyExample}. Required. Letters, digits, "-", "_" and ".", at most 253 characters.`,
        minLength: 1,
        maxLength: 253,
        pattern: SECRET_KEY,
        errorMessage: 'must be a Secret key: letters, digits, "-", "_" and "."',
      }),
    },
    { description, additionalProperties: false },
  );
}

export const SecretKeyRefSchema = secretKeyRef(
  'the API key',
  '',
  "API key of this backend, read by the controller from a Secret in the pool's namespace and sent as `Authorization: Bearer <key>`. Needs the controller: a standalone pool file uses apiKeyEnv instead. At most one of apiKeySecretRef and apiKeyEnv. On a service backend it needs allowInsecureApiKey: true, and so does an http:// url other than localhost, 127.0.0.1 or [::1].",
);

/** The largest `caBundle`: room for a few dozen certificates, far from the API's object limit. */
export const CA_BUNDLE_MAX_LENGTH = 65_536;

export const CaSecretRefSchema = secretKeyRef(
  'the PEM bundle',
  ', e.g. ca.crt (what cert-manager writes)',
  "The CA bundle of tls, read by the controller from a key of a Secret in the pool's namespace (a cert-manager or trust-manager Secret, for instance) and sent to the sidecars in the snapshot. Needs the controller: a standalone pool file uses caBundle instead.",
);

export const BackendTlsSchema = Type.Object(
  {
    caBundle: Type.Optional(
      Type.String({
        description:
          'PEM certificates (one or more `-----BEGIN CERTIFICATE-----` blocks) of the CAs to trust for this backend, instead of the system CAs (like caCertificates of an Istio DestinationRule). Unset, with caSecretRef unset too: the system CAs. At most 65536 characters.',
        minLength: 1,
        maxLength: CA_BUNDLE_MAX_LENGTH,
        'x-switchyard-format': 'pem',
      }),
    ),
    caSecretRef: Type.Optional(CaSecretRefSchema),
    serverName: Type.Optional(
      Type.String({
        description:
          "The name the endpoint's certificate must carry, also sent as SNI: for an endpoint reached by IP address (the pods of a Service) or by an alias its certificate does not name. Unset: the URL's host. A DNS name or an IP address, at most 253 characters.",
        minLength: 1,
        maxLength: 253,
        pattern: '^[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$',
        errorMessage: 'must be a DNS name like vllm.inference.svc or an IP address',
      }),
    ),
    insecureSkipVerify: Type.Boolean({
      description:
        'Accept any certificate, without checking who signed it or whom it names: the traffic is encrypted but not authenticated. For a test setup only; not with caBundle or caSecretRef. Default: false.',
      default: false,
    }),
  },
  {
    description:
      "How the sidecar checks the certificates of this backend's https endpoints: which CAs to trust and which name to expect. Applies to https URLs and to Service ports that speak https (appProtocol or name https). A certificate that fails the check fails the attempt like a refused connection: it counts against the endpoint and the request is retried on another one.",
    additionalProperties: false,
    'x-kubernetes-validations': celValidations(TLS_RULES),
  },
);

export const BackendSchema = Type.Object(
  {
    name: Type.String({
      description:
        'Name of the backend, unique within the pool. Required. Shows in metrics, logs, the x-switchyard-backend response header and endpoint ids (`<name>/<host>:<port>`). A DNS label: lower-case letters, digits and "-", starting and ending with a letter or digit, at most 63 characters.',
      minLength: 1,
      maxLength: 63,
      pattern: DNS_LABEL,
      errorMessage:
        'must be a name of lower-case letters, digits and "-", starting and ending with a letter or digit, like in-cluster or provider-2',
    }),
    service: Type.Optional(ServiceRefSchema),
    inferencePoolRef: Type.Optional(InferencePoolRefSchema),
    url: Type.Optional(
      url(
        'Base URL of one endpoint, including the API prefix, e.g. `https://api.example.com/v1` or `http://10.0.0.7:8000/v1`; requests go to `<url>/chat/completions` and so on. http or https, no user, query or fragment; a trailing "/" is ignored. Set exactly one of service, inferencePoolRef, url or urls.',
      ),
    ),
    urls: Type.Optional(
      Type.Array(
        url(
          'Base URL of one endpoint of this backend, including the API prefix. http or https, no user, query or fragment.',
        ),
        {
          description:
            'Base URLs of several endpoints that make up this one backend (one model served by several replicas): 1 to 64 distinct URLs, each like the url field. Set exactly one of service, inferencePoolRef, url or urls.',
          minItems: 1,
          maxItems: 64,
          'x-kubernetes-list-type': 'set',
        },
      ),
    ),
    costPerMTok: Type.Number({
      description:
        'Price of this backend in dollars per million tokens; with spec.costWeightPerMs it adds costPerMTok / costWeightPerMs milliseconds to the score of each of its endpoints. At least 0. Default: 0.',
      minimum: 0,
      default: 0,
    }),
    model: Type.Optional(
      Type.String({
        description:
          'Model name to put into each request sent to this backend instead of the one the client asked for, e.g. when a provider calls the same model differently. Unset: the request is passed on as it is. 1 to 256 characters.',
        minLength: 1,
        maxLength: 256,
      }),
    ),
    apiKeySecretRef: Type.Optional(SecretKeyRefSchema),
    apiKeyEnv: Type.Optional(
      Type.String({
        description:
          "Name of an environment variable of the sidecar that holds this backend's API key, sent as `Authorization: Bearer <key>`. Meant for standalone pool files; a missing or empty variable is an error when the pool is loaded. At most one of apiKeySecretRef and apiKeyEnv; an http:// url other than localhost, 127.0.0.1 or [::1] needs allowInsecureApiKey: true.",
        minLength: 1,
        maxLength: 128,
        pattern: ENV_NAME,
        errorMessage:
          'must be an environment variable name: letters, digits and "_", not starting with a digit',
      }),
    ),
    apiKeyHeader: Type.Optional(
      Type.Union([Type.Literal('Authorization'), Type.Literal('x-api-key')], {
        description:
          "The header that carries the API key of apiKeySecretRef or apiKeyEnv: Authorization (as `Authorization: Bearer <key>`, what OpenAI-style servers such as vLLM and SGLang read) or x-api-key (the key as it is, what Anthropic-style providers read). The client's own Authorization and x-api-key headers are not forwarded to a backend with a key. Default: Authorization.",
      }),
    ),
    tls: Type.Optional(BackendTlsSchema),
    allowInsecureApiKey: Type.Boolean({
      description:
        "Accept that this backend's API key is sent over plain http: needed for apiKeySecretRef on a service backend (a Service port is reached over plain http unless its appProtocol or name says https, which the schema cannot know) and for a key on an http:// url other than localhost, 127.0.0.1 or [::1]. Default: false.",
      default: false,
    }),
    models: Type.Optional(
      Type.Array(
        Type.String({
          description:
            'A model name as requests name it once aliases are resolved: a base model or a LoRA adapter. 1 to 256 characters.',
          minLength: 1,
          maxLength: 256,
        }),
        {
          description:
            "The models this backend's endpoints serve, base models and LoRA adapters alike, as requests name them (after spec.aliases). A request naming a model goes only to endpoints that serve it; an endpoint of a backend without models is asked for its own list (GET /v1/models) and, until it answers, may get any model. 1 to 128 distinct names. Unset: learn them from the endpoints.",
          minItems: 1,
          maxItems: MAX_MODELS,
          'x-kubernetes-list-type': 'set',
        },
      ),
    ),
    weight: Type.Optional(
      Type.Integer({
        description:
          "This backend's share of the traffic of its tier, for a weighted split such as a 95/5 canary: within a tier, a backend is picked in proportion to its weight, then the least loaded of its endpoints. A tier is the whole pool in Balance mode and each backend on its own in Failover mode. Set it on every backend of the tier or on none; the weights of a tier must not all be 0. 0: no traffic while another backend of the tier has a live endpoint. An integer from 0 to 1000000. Unset on every backend: no split, plain load-aware balancing.",
        minimum: 0,
        maximum: MAX_WEIGHT,
      }),
    ),
  },
  {
    description:
      'One backend: a Service, a Gateway API inference extension InferencePool, or one or more URLs serving the same models at the same price. Set exactly one of service, inferencePoolRef, url or urls.',
    additionalProperties: false,
    'x-kubernetes-validations': celValidations(BACKEND_RULES),
  },
);

// ---------------------------------------------------------------------------------------------
// spec sections
// ---------------------------------------------------------------------------------------------

export const AffinitySchema = Type.Object(
  {
    key: Type.Union([Type.Literal('Prefix'), Type.Literal('Header'), Type.Literal('None')], {
      description:
        'Where affinity comes from. Prefix: the prompt itself; each sidecar remembers which endpoint it sent which prompt prefixes to and sends a request where its longest known prefix went, and a new prompt goes to the home its system prompt and first user message hash to (the same from every sidecar), so the turns of a conversation and requests sharing a long prefix meet the same prompt cache. Header: the value of the header named by header (a session id) chooses the home. None: no affinity, every request is balanced on its own. Default: Prefix.',
      default: 'Prefix',
    }),
    header: Type.String({
      description:
        'Request header that carries the affinity key when key is Header; matched case-insensitively. An HTTP header name. Default: x-session-id.',
      minLength: 1,
      maxLength: 256,
      pattern: HEADER_NAME,
      default: 'x-session-id',
      errorMessage: 'must be an HTTP header name like x-session-id (no spaces or ":")',
    }),
    prefixChars: Type.Integer({
      description:
        "When key is Prefix, a new prompt's home is chosen by its system prompt and first user message, but by at most this many characters of them (a first message holding a whole document gets its home from the document's start). An integer from 64 to 1000000. Default: 4096.",
      minimum: 64,
      maximum: 1_000_000,
      default: 4096,
    }),
    maxSlowdown: Type.Number({
      description: `An endpoint is passed over for affinity while its breaker is not closed or its time to first token, measured over at least ${AFFINITY_SLOWDOWN_MIN_SAMPLES} of its own requests (the median of the last five), exceeds both this multiple of the candidates' median and that median plus ${AFFINITY_SLOWDOWN_MIN_MS} ms; the request goes to the next endpoint of its order. At least 1. Default: ${AFFINITY_MAX_SLOWDOWN}.`,
      minimum: 1,
      default: AFFINITY_MAX_SLOWDOWN,
    }),
    maxExtraInFlight: Type.Integer({
      description: `An endpoint always takes a request it has affinity for while its load is at most this many requests above the least loaded candidate, whatever loadFactor says: near idle, a cache hit beats an empty queue. Like loadFactor, it applies while the endpoint's server has not shown its batch; once it has (it reported running requests and, lately, waiting ones), the test is a free slot there. An integer from 0. Default: ${AFFINITY_MAX_EXTRA_IN_FLIGHT}.`,
      minimum: 0,
      maximum: 1_000_000,
      default: AFFINITY_MAX_EXTRA_IN_FLIGHT,
    }),
    loadFactor: Type.Number({
      description: `The load bound of affinity (consistent hashing with bounded loads): an endpoint takes the requests it has affinity for while its load (requests in flight, as the servers report them and this sidecar counts them) is under loadFactor × the candidates' average; past it, the request spills to the next endpoint of its order, the same from every sidecar. Lower spreads hot prompts sooner; higher keeps more cache hits. It applies while the endpoint's server has not shown its batch (it reports no load, or has not queued lately); once it has, the endpoint takes such a request while it has a free slot, and a full one sends it to balancing. From 1 to 100. Default: ${AFFINITY_LOAD_FACTOR}.`,
      minimum: 1,
      maximum: 100,
      default: AFFINITY_LOAD_FACTOR,
    }),
  },
  {
    description:
      'Cache affinity: requests that share a prompt prefix (or an affinity header) go to the endpoint that likely holds its KV cache, spilling to a consistent second endpoint when that one is over its load bound.',
    additionalProperties: false,
    default: {},
  },
);

export const HealthSchema = Type.Object(
  {
    window: duration(
      `Length of the sliding window over which each endpoint's error and 429 rates are computed. ${DURATION_SYNTAX} Default: 10s.`,
      '10s',
    ),
    minRequests: Type.Integer({
      description:
        'A breaker may open only when the window holds at least this many finished requests, so one early failure cannot eject an endpoint. An integer, at least 1. Default: 20.',
      minimum: 1,
      default: 20,
    }),
    maxErrorRate: Type.Number({
      description:
        'Open the breaker when errors (connect errors, resets, timeouts, 5xx) reach this fraction of the requests in the window. From 0 to 1. Default: 0.5.',
      minimum: 0,
      maximum: 1,
      default: 0.5,
    }),
    consecutiveErrors: Type.Integer({
      description: `Also open the breaker after this many errors in a row from the endpoint, however few requests the window holds (a success ends the run; 429s and the client's own faults neither add nor end it). A sidecar that sends an endpoint a request every few seconds never reaches minRequests, and an endpoint that fails at once looks idle, so it would keep getting first attempts. 0 turns it off. An integer from 0 to 1000. Default: ${HEALTH_CONSECUTIVE_ERRORS}.`,
      minimum: 0,
      maximum: 1000,
      default: HEALTH_CONSECUTIVE_ERRORS,
    }),
    max429Rate: Type.Number({
      description:
        'Open the breaker when 429 (rate limited) answers reach this fraction of the requests in the window. From 0 to 1. Default: 0.3.',
      minimum: 0,
      maximum: 1,
      default: 0.3,
    }),
    maxTtftSlowdown: Type.Number({
      description:
        "Mark an endpoint slow (breaker open) when its EWMA time to first token exceeds this multiple of the median of the pool's other endpoints. At least 1. Default: 4.",
      minimum: 1,
      default: 4,
    }),
    openFor: duration(
      `How long a breaker stays open the first time; then one probe request is let through (half-open). Each consecutive opening doubles it, up to maxOpenFor. ${DURATION_SYNTAX} Default: 30s.`,
      '30s',
    ),
    maxOpenFor: duration(
      `Longest open period of a breaker that keeps failing its probes. At least openFor. ${DURATION_SYNTAX} Default: 5m.`,
      '5m',
    ),
  },
  {
    description:
      'Passive health: each sidecar watches the outcomes of real traffic per endpoint and opens a breaker (stops sending) on too many errors, 429s or a much slower time to first token.',
    additionalProperties: false,
    default: {},
    'x-kubernetes-validations': celValidations(HEALTH_RULES),
  },
);

export const RetrySchema = Type.Object(
  {
    budgetPercent: Type.Number({
      description:
        'Retries may add at most this percentage of the recent first attempts (a retry budget shared by all requests, so a failing backend cannot cause a retry storm). From 0 to 100. Default: 20.',
      minimum: 0,
      maximum: 100,
      default: 20,
    }),
    minPerSecond: Type.Number({
      description:
        'Retries per second allowed on top of the budget, so that low traffic can still retry. At least 0. Default: 10.',
      minimum: 0,
      default: 10,
    }),
    maxAttempts: Type.Integer({
      description:
        'Attempts per client request, the first one included; 1 turns retries off. A request is only retried (on another endpoint) while nothing has reached the client yet. An integer from 1 to 10. Default: 3.',
      minimum: 1,
      maximum: 10,
      default: 3,
    }),
  },
  {
    description: 'Retries of failed attempts on another endpoint.',
    additionalProperties: false,
    default: {},
  },
);

export const ColdStartSchema = Type.Object(
  {
    idleAfter: duration(
      `An endpoint that finished no request for this long is cold: the time to first token of its next request is not fed into its EWMA (it would be a false signal). ${DURATION_SYNTAX} Default: 60s.`,
      '60s',
    ),
  },
  {
    description: 'Cold starts: how the first sample after an idle period is treated.',
    additionalProperties: false,
    default: {},
  },
);

export const TimeoutsSchema = Type.Object(
  {
    connect: duration(
      `Time to open the connection to an endpoint (for https, the TLS handshake included); past it the attempt is an error (and may be retried). ${DURATION_SYNTAX} Default: 5s.`,
      '5s',
    ),
    firstByte: duration(
      `Time from sending the request to the first byte of the response body; a stall past it is an error (and may be retried while nothing has reached the client). ${DURATION_SYNTAX} Default: 60s.`,
      '60s',
    ),
    idle: duration(
      `Longest gap between two chunks of a response body; past it the response is cut off and counted as an error. ${DURATION_SYNTAX} Default: 5m.`,
      '5m',
    ),
    clientStall: duration(
      `Longest time a client may leave its connection full, reading nothing of a response it asked for: counted from the write that filled the connection until the connection has room again. Past it the sidecar closes that client's connection and cancels the upstream request, so the model server frees the request's slot; nothing counts against the endpoint (the attempt ends as aborted, counted in switchyard_client_stalled_total and logged as 'client stopped reading; connection closed'). It restarts whenever the client takes some of the response, so a slow reader is cut only if it takes none of the buffered response for this long (the kernel reports room again once the client has read part of its socket buffer, which is up to a few MB). The default is nginx's send_timeout. ${DURATION_SYNTAX} Default: ${CLIENT_STALL_MS / 1000}s.`,
      `${CLIENT_STALL_MS / 1000}s`,
    ),
  },
  {
    description: 'Timeouts of each attempt to an endpoint, and of a client that stops reading.',
    additionalProperties: false,
    default: {},
  },
);

export const DriftSchema = Type.Object(
  {
    probeEvery: Type.Optional(
      duration(
        `How often each endpoint is probed with the drift prompt to check what it really serves. Unset: no probing, drift detection is off. ${DURATION_SYNTAX}`,
      ),
    ),
    expect: Type.String({
      description:
        'What a healthy answer looks like. Majority: the fingerprint most endpoints of the pool return. Anything else: that exact fingerprint. 1 to 256 characters. Default: Majority.',
      minLength: 1,
      maxLength: 256,
      default: 'Majority',
    }),
    action: Type.Union([Type.Literal('Exclude'), Type.Literal('Warn')], {
      description:
        'What happens to an endpoint whose fingerprint differs. Exclude: it gets no traffic until it matches again. Warn: it is reported in status and metrics only. Default: Exclude.',
      default: 'Exclude',
    }),
    prompt: Type.Optional(
      Type.String({
        description:
          'The probe request sent to each endpoint; unset: a built-in prompt. At most 16384 characters.',
        minLength: 1,
        maxLength: 16384,
      }),
    ),
  },
  {
    description:
      'Quality drift detection: probe each endpoint (not each model name) for what it actually serves, and act on the ones that differ.',
    additionalProperties: false,
    default: {},
  },
);

// ---------------------------------------------------------------------------------------------
// spec.flowControl
// ---------------------------------------------------------------------------------------------

/** Largest `spec.flowControl.queue.maxBytes`: 16 GiB, far beyond any sidecar's memory. */
export const MAX_QUEUE_BYTES = 17_179_869_184;

export const FlowQueueSchema = Type.Object(
  {
    maxRequests: Type.Integer({
      description:
        "Most requests of this pool waiting in one sidecar's queue; a request that finds the queue full gets a 429 with code queue_full at once. 0: nothing waits, a request without room is refused at once. An integer from 0 to 1000000. Default: 1000.",
      minimum: 0,
      maximum: 1_000_000,
      default: 1000,
      format: 'int32',
    }),
    maxBytes: Type.Integer({
      description: `Most bytes of request bodies held by that queue (the bodies of waiting requests stay in the sidecar's memory); a request whose body does not fit gets a 429 with code queue_full at once. An integer number of bytes from 0 to ${MAX_QUEUE_BYTES} (16 GiB). Default: 67108864.`,
      minimum: 0,
      maximum: MAX_QUEUE_BYTES,
      default: 67_108_864,
      format: 'int64',
    }),
  },
  {
    description:
      "The bound of each sidecar's queue of this pool, in requests and in bytes of held bodies: past either, a request is refused at once instead of waiting.",
    additionalProperties: false,
    default: {},
  },
);

export const SaturationSchema = Type.Object(
  {
    kvCacheUsage: Type.Number({
      description:
        'An endpoint whose server reports its KV cache at least this full (a fraction: 0.95 is 95 %) is saturated and takes no more requests while others wait; so is one whose server reports requests waiting in its own queue. Greater than 0, at most 1. Default: 0.95.',
      exclusiveMinimum: 0,
      maximum: 1,
      default: 0.95,
    }),
    sheddableHeadroom: Type.Number({
      description:
        'The part of each endpoint that sheddable requests (negative priority) leave free for the others, a fraction of its batch (the most requests its server has been seen running while it queued more), of maxInFlightPerEndpoint, and of kvCacheUsage: with 0.2 a server of 8 slots takes a sheddable request only while more than 2 of them are free (0.2 × 8 rounded up), and only below 80 % of kvCacheUsage, so that a request of priority 0 or more arriving a moment later finds room at once instead of waiting behind batch work. 0: sheddable requests fill endpoints to the brim. From 0 to 1. Default: 0.2.',
      minimum: 0,
      maximum: 1,
      default: SHEDDABLE_HEADROOM,
    }),
    preemptSheddable: Type.Boolean({
      description:
        "true: when a request of priority 0 or more finds every endpoint it could go to saturated, end a sheddable request (negative priority) of the same sidecar that has sent nothing to its client yet and take its slot (the model server frees it when the sidecar drops the connection); and when such a request's server reports a queue before it has any answer, end one sheddable request of the same sidecar on that endpoint. The preempted request waits in the queue and is sent again when there is room (its client only sees a later answer); the victim is of the lowest priority and the last sent. The work the server did on it is lost: in the priority benchmark (4 sidecars) the interactive p99 fell from 1.7-5.2 s to 0.8-1.0 s and the servers' throughput from 95 % to 78-83 % of least-connections. false: a request of a higher priority waits for a slot to free instead. Default: false.",
      default: false,
    }),
    maxInFlightPerEndpoint: Type.Optional(
      Type.Integer({
        description:
          'An endpoint whose server reports no load (a provider API, a server without metrics) is saturated once this sidecar has this many requests in flight there. Unset: such an endpoint is never saturated, requests go there without waiting. An integer from 1 to 1000000.',
        minimum: 1,
        maximum: 1_000_000,
        format: 'int32',
      }),
    ),
  },
  {
    description:
      'When an endpoint is saturated (full): a request waits in the queue while every endpoint it could go to is saturated.',
    additionalProperties: false,
    default: {},
  },
);

export const WorkloadSchema = Type.Object(
  {
    serviceAccount: Type.Optional(
      Type.Object(
        {},
        {
          description:
            "Each app pod's ServiceAccount is its workload (namespace/name): every request of a sidecar is one workload. The controller names it from the pod the sidecar's token is bound to; a standalone sidecar takes it from its --workload flag. Set it as an empty mapping: serviceAccount: {}.",
          additionalProperties: false,
        },
      ),
    ),
    podLabel: Type.Optional(
      Type.String({
        description:
          'The value of this label of each app pod is its workload, e.g. app.kubernetes.io/name: every request of a sidecar is one workload. The controller reads it from the pod the sidecar\'s token is bound to; a standalone sidecar takes it from its --workload flag. A label key: an optional DNS-subdomain prefix and "/", then up to 63 letters, digits, "-", "_" and ".".',
        minLength: 1,
        maxLength: 317,
        pattern: LABEL_KEY,
        errorMessage: 'must be a label key like team or app.kubernetes.io/name',
      }),
    ),
    header: Type.Optional(
      Type.String({
        description:
          "The value of this request header is the request's workload, e.g. x-team; matched case-insensitively and forwarded as it is. A request without the header counts only against the pool-wide budget. An HTTP header name.",
        minLength: 1,
        maxLength: 256,
        pattern: HEADER_NAME,
        errorMessage: 'must be an HTTP header name like x-team (no spaces or ":")',
      }),
    ),
  },
  {
    description:
      'Where the workload of a request comes from, for per-workload budgets and fairness in the queue: exactly one of serviceAccount: {}, podLabel: <label key> or header: <header name>. Unset: every request is of one workload, and budgets with a workload are refused.',
    additionalProperties: false,
    'x-kubernetes-validations': celValidations(WORKLOAD_RULES),
  },
);

export const BudgetSchema = Type.Object(
  {
    workload: Type.Optional(
      Type.String({
        description:
          'The workload this budget limits: a ServiceAccount (namespace/name), a pod label value or a header value, as flowControl.workload says. Unset: the pool-wide budget, which every request of the pool counts against (at most one). Unique within budgets. 1 to 317 characters.',
        minLength: 1,
        maxLength: 317,
      }),
    ),
    requestsPerMinute: Type.Optional(
      Type.Number({
        description:
          'Requests per minute this budget allows, summed over every sidecar of the pool. Greater than 0. Unset: requests are not limited.',
        exclusiveMinimum: 0,
      }),
    ),
    tokensPerMinute: Type.Optional(
      Type.Number({
        description:
          "Tokens per minute this budget allows, summed over every sidecar of the pool: prompt plus completion tokens, from each response's usage. Greater than 0. Unset: tokens are not limited.",
        exclusiveMinimum: 0,
      }),
    ),
  },
  {
    description:
      'One budget: a rate per minute for the whole pool (no workload) or for one workload; at least one of requestsPerMinute and tokensPerMinute.',
    additionalProperties: false,
    'x-kubernetes-validations': celValidations(BUDGET_RULES),
  },
);

export const FlowControlSchema = Type.Object(
  {
    defaultPriority: Type.Integer({
      description:
        'Priority of a request that has no x-switchyard-priority header and whose pod sets no default (annotation switchyard.dev/priority). Higher is served first; below 0 is sheddable: refused at once (429) instead of waiting. An integer from -1000000 to 1000000. Default: 0.',
      minimum: -1_000_000,
      maximum: 1_000_000,
      default: 0,
      format: 'int32',
    }),
    maxQueueWait: duration(
      `Longest a request waits in the queue (for an endpoint with room or for budget) before it gets a 429 with Retry-After saying why. ${DURATION_SYNTAX} Default: 30s.`,
      '30s',
    ),
    queue: FlowQueueSchema,
    saturation: SaturationSchema,
    workload: Type.Optional(WorkloadSchema),
    budgets: Type.Optional(
      Type.Array(BudgetSchema, {
        description: `Requests and tokens per minute for the whole pool and per workload, held across every sidecar: each sidecar enforces its share, which the controller re-splits from what the sidecars use (a standalone sidecar enforces the whole budget). Over budget, a request waits in the queue or, if sheddable, gets a 429 with code over_budget. At most one entry without workload; workload values unique; entries with a workload need flowControl.workload. At most ${MAX_BUDGETS}.`,
        maxItems: MAX_BUDGETS,
        'x-kubernetes-list-type': 'atomic',
        'x-kubernetes-validations': celValidations(BUDGETS_RULES),
      }),
    ),
  },
  {
    description:
      'Flow control (docs/flow-control.md): priorities, a bounded queue in each sidecar while every endpoint is saturated instead of overloading them, and budgets held across the fleet. Unset: no queue and no budgets; every request goes to an endpoint at once.',
    additionalProperties: false,
    'x-kubernetes-validations': celValidations(FLOW_CONTROL_RULES),
  },
);

// ---------------------------------------------------------------------------------------------
// spec.scaleFromZero
// ---------------------------------------------------------------------------------------------

/** Largest `spec.scaleFromZero.maxBytes`: 16 GiB, as for the flow-control queue. */
export const MAX_HELD_BYTES = MAX_QUEUE_BYTES;

export const ScaleFromZeroSchema = Type.Object(
  {
    maxWait: duration(
      `Longest a request is held while the pool has no ready endpoint; then it gets a 503 with Retry-After, as a pool with no endpoint answers at once without scaleFromZero. Model servers take minutes to start (image pull, weights), and the openai clients wait 10 minutes by default. ${DURATION_SYNTAX} Default: 5m.`,
      '5m',
    ),
    maxRequests: Type.Integer({
      description:
        'Most requests of this pool held at once by one sidecar; one more gets the 503 at once. An integer from 1 to 100000. Default: 100.',
      minimum: 1,
      maximum: 100_000,
      default: 100,
      format: 'int32',
    }),
    maxBytes: Type.Integer({
      description: `Most bytes of request bodies one sidecar holds for this pool (held bodies stay in its memory); a request whose body does not fit gets the 503 at once. An integer number of bytes from 0 to ${MAX_HELD_BYTES} (16 GiB). Default: 16777216.`,
      minimum: 0,
      maximum: MAX_HELD_BYTES,
      default: 16_777_216,
      format: 'int64',
    }),
  },
  {
    description:
      'Scale from zero (docs/autoscaling.md): while the pool has no ready endpoint, each sidecar holds requests, bounded in time, count and bytes, and reports them, so that an autoscaler scaling on switchyard_pool_demand_held_requests brings the first server up; held requests go out once an endpoint is ready. A client that disconnects while held is dropped at once. Unset: off, a pool with no ready endpoint answers 503 at once.',
    additionalProperties: false,
  },
);

export const AliasSchema = Type.Object(
  {
    name: Type.String({
      description:
        'The model name clients send, e.g. gpt-4o-mini. Required, unique within the pool. 1 to 256 characters.',
      minLength: 1,
      maxLength: 256,
    }),
    model: Type.String({
      description:
        'The served model a request for name is sent with, e.g. llama-3.1-8b-instruct: a base model or a LoRA adapter, never another alias. Required. 1 to 256 characters.',
      minLength: 1,
      maxLength: 256,
    }),
  },
  {
    description: 'One alias: a client-facing model name and the served model it stands for.',
    additionalProperties: false,
  },
);

export const InferencePoolSpecSchema = Type.Object(
  {
    mode: Type.Union([Type.Literal('Balance'), Type.Literal('Failover')], {
      description:
        'Balance: spread requests over the endpoints of all backends continuously. Failover: use the first backend (in list order) that has a live endpoint, and spread only over its endpoints. Default: Balance.',
      default: 'Balance',
    }),
    costWeightPerMs: Type.Optional(
      Type.Number({
        description:
          'The money/latency exchange rate: how many dollars per million tokens are worth one millisecond of time to first token. An endpoint scores (inFlight + 1) * ewmaTtftMs + costPerMTok / costWeightPerMs; a smaller value makes price matter more. Greater than 0. Unset: pure latency routing, prices are ignored.',
        exclusiveMinimum: 0,
      }),
    ),
    defaultTtft: duration(
      `Time to first token assumed for an endpoint before the pool has any measurement (new endpoints otherwise start from the pool median). ${DURATION_SYNTAX} Default: 500ms.`,
      '500ms',
    ),
    models: Type.Optional(
      Type.Array(
        Type.String({
          description: 'A model name, as clients send it in the request. 1 to 256 characters.',
          minLength: 1,
          maxLength: 256,
        }),
        {
          description:
            'Models this pool serves; a request for another model gets a 404 at once. Unset or empty: any model is passed on. At most 128 distinct names.',
          maxItems: MAX_MODELS,
          'x-kubernetes-list-type': 'set',
        },
      ),
    ),
    aliases: Type.Optional(
      Type.Array(AliasSchema, {
        description:
          'Client-facing model names and the served model each stands for, e.g. gpt-4o-mini for llama-3.1-8b-instruct, so that an app written for a provider moves without code changes: a request for name is sent with model, and the x-switchyard-backend response header shows the rewrite. A model that is not an alias is never rewritten by this list. Names are unique; an alias points at a served model, never at another alias; an alias name is not one of spec.models, and when spec.models is set the alias model must be one of them. At most 64.',
        maxItems: MAX_ALIASES,
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['name'],
        'x-kubernetes-validations': celValidations(ALIASES_RULES),
      }),
    ),
    backends: Type.Array(BackendSchema, {
      description:
        'The backends of the pool, 1 to 64, with unique names. The order matters: it is the failover order (first = preferred) in Failover mode.',
      minItems: 1,
      maxItems: 64,
      'x-kubernetes-list-type': 'atomic',
      'x-kubernetes-validations': celValidations(BACKENDS_RULES),
    }),
    affinity: AffinitySchema,
    health: HealthSchema,
    retry: RetrySchema,
    coldStart: ColdStartSchema,
    timeouts: TimeoutsSchema,
    drift: DriftSchema,
    flowControl: Type.Optional(FlowControlSchema),
    scaleFromZero: Type.Optional(ScaleFromZeroSchema),
  },
  {
    description:
      'Desired state of the pool: its backends in order and the routing policy every sidecar applies to them.',
    additionalProperties: false,
    'x-kubernetes-validations': celValidations(SPEC_RULES),
  },
);

// ---------------------------------------------------------------------------------------------
// status (written by the controller; a skeleton for now)
// ---------------------------------------------------------------------------------------------

/** Most entries of status.models: room for many models without growing the object unbounded. */
export const STATUS_MODELS_LIMIT = 256;

const count = (description: string) =>
  Type.Optional(Type.Integer({ description, minimum: 0, format: 'int32' }));

export const ConditionSchema = Type.Object(
  {
    type: Type.String({
      description: 'Kind of condition: Accepted, ResolvedRefs or Ready.',
      minLength: 1,
      maxLength: 316,
    }),
    status: Type.Union([Type.Literal('True'), Type.Literal('False'), Type.Literal('Unknown')], {
      description: 'True, False or Unknown.',
    }),
    observedGeneration: Type.Optional(
      Type.Integer({
        description: 'metadata.generation of the pool this condition was computed from.',
        minimum: 0,
        format: 'int64',
      }),
    ),
    lastTransitionTime: Type.String({
      description: 'When the condition last changed its status (RFC 3339).',
      pattern:
        '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$',
      'x-crd-format': 'date-time',
      errorMessage: 'must be an RFC 3339 time like 2025-01-31T12:00:00Z',
    }),
    reason: Type.String({
      description: 'Why, in one CamelCase word, e.g. BackendsResolved.',
      minLength: 1,
      maxLength: 1024,
      pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$',
      errorMessage: 'must be one CamelCase word like BackendsResolved',
    }),
    message: Type.String({
      description: 'Why, for a person. At most 32768 characters.',
      maxLength: 32768,
    }),
  },
  {
    description: 'One condition of the pool, in the standard Kubernetes shape.',
    additionalProperties: false,
  },
);

export const InferencePoolStatusSchema = Type.Object(
  {
    observedGeneration: Type.Optional(
      Type.Integer({
        description: 'metadata.generation of the spec this status describes.',
        minimum: 0,
        format: 'int64',
      }),
    ),
    conditions: Type.Optional(
      Type.Array(ConditionSchema, {
        description:
          'Accepted (the spec is valid), ResolvedRefs (Services and Secrets were found) and Ready (at least one endpoint is live), one of each type.',
        maxItems: 16,
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['type'],
      }),
    ),
    endpoints: Type.Optional(
      Type.Object(
        {
          ready: count('Endpoints that are ready and not excluded by drift detection.'),
          total: count('Endpoints of all backends.'),
          drifted: count('Endpoints excluded or flagged by drift detection.'),
        },
        { description: 'Endpoint counts over all backends.', additionalProperties: false },
      ),
    ),
    snapshot: Type.Optional(
      Type.Object(
        {
          version: Type.Optional(
            Type.Integer({
              description: 'Version of the latest snapshot pushed to the sidecars.',
              minimum: 0,
              format: 'int64',
            }),
          ),
          hash: Type.Optional(
            Type.String({ description: 'Content hash of that snapshot.', maxLength: 128 }),
          ),
        },
        {
          description: 'The latest snapshot (policy and endpoints) the controller pushes.',
          additionalProperties: false,
        },
      ),
    ),
    sidecars: Type.Optional(
      Type.Object(
        {
          connected: count('Sidecars connected to the snapshot stream.'),
          inSync: count('Connected sidecars that applied the latest snapshot.'),
        },
        { description: 'The sidecars that use this pool.', additionalProperties: false },
      ),
    ),
    drift: Type.Optional(
      Type.Object(
        {
          expected: Type.Optional(
            Type.String({
              description:
                'The fingerprint endpoints are compared with: the one most endpoints answer (expect: Majority) or the configured one. Unset while the majority is undecided.',
              maxLength: 512,
            }),
          ),
          endpoints: Type.Array(
            Type.Object(
              {
                id: Type.String({
                  description: 'Endpoint id: backend/host:port.',
                  minLength: 1,
                  maxLength: 512,
                }),
                fingerprint: Type.Optional(
                  Type.String({
                    description:
                      'What its last successful probe answered: model/system_fingerprint/hash of the deterministic completion.',
                    maxLength: 512,
                  }),
                ),
                drifted: Type.Boolean({
                  description:
                    'Its fingerprint differs from expected: excluded from routing (drift.action Exclude) or only reported (Warn).',
                }),
                probedAt: Type.Optional(
                  Type.String({
                    description: 'When it was last probed (RFC 3339).',
                    format: 'date-time',
                    maxLength: 64,
                  }),
                ),
                error: Type.Optional(
                  Type.String({
                    description:
                      'Why the last probe failed, when it did (a failed probe is not drift: the last fingerprint stands).',
                    maxLength: 256,
                  }),
                ),
              },
              { description: 'One probed endpoint.', additionalProperties: false },
            ),
            {
              description: 'Every probed endpoint, drifted first (at most 256).',
              maxItems: 256,
              'x-kubernetes-list-type': 'map',
              'x-kubernetes-list-map-keys': ['id'],
            },
          ),
        },
        {
          description:
            'Drift detection (drift.probeEvery): what each endpoint answered the probe, and which ones differ.',
          additionalProperties: false,
        },
      ),
    ),
    models: Type.Optional(
      Type.Array(
        Type.Object(
          {
            name: Type.String({
              description: 'A model name: one that a backend lists in models, or an alias.',
              minLength: 1,
              maxLength: 256,
            }),
            endpoints: Type.Integer({
              description:
                "Ready endpoints that serve it by their backend's models (for an alias: those of its model); 0 means requests for it find no endpoint that declares it.",
              minimum: 0,
              format: 'int32',
            }),
            aliasOf: Type.Optional(
              Type.String({
                description: 'For an alias (spec.aliases): the served model it stands for.',
                minLength: 1,
                maxLength: 256,
              }),
            ),
          },
          { description: 'One model the pool serves.', additionalProperties: false },
        ),
        {
          description: `The models the pool serves as its backends declare them (spec.backends[].models), each with its ready endpoints, then the aliases with the model each stands for; at most ${STATUS_MODELS_LIMIT}. Unset when no backend declares models: the sidecars then learn them from the endpoints, and only they know.`,
          maxItems: STATUS_MODELS_LIMIT,
          'x-kubernetes-list-type': 'map',
          'x-kubernetes-list-map-keys': ['name'],
        },
      ),
    ),
    budgets: Type.Optional(
      Type.Array(
        Type.Object(
          {
            id: Type.String({
              description:
                'The budget: pool for the pool-wide one, workload:<value> for a workload.',
              minLength: 1,
              maxLength: 330,
            }),
            workload: Type.Optional(
              Type.String({ description: 'The workload it limits.', minLength: 1, maxLength: 317 }),
            ),
            sidecars: Type.Integer({
              description: 'Sidecars sharing it (subscribed to any live controller replica).',
              minimum: 0,
              format: 'int32',
            }),
            requestsPerMinute: Type.Optional(
              Type.Object(
                {
                  limit: Type.Number({
                    description: 'The budget, requests per minute.',
                    minimum: 0,
                  }),
                  used: Type.Number({
                    description: 'Requests the sidecars used over their last minute, summed.',
                    minimum: 0,
                  }),
                  wanted: Type.Number({
                    description:
                      'Requests they wanted over their last minute (used, refused and waiting), summed.',
                    minimum: 0,
                  }),
                },
                {
                  description: 'The budget in requests per minute, and the fleet’s use and demand.',
                  additionalProperties: false,
                },
              ),
            ),
            tokensPerMinute: Type.Optional(
              Type.Object(
                {
                  limit: Type.Number({ description: 'The budget, tokens per minute.', minimum: 0 }),
                  used: Type.Number({
                    description: 'Tokens the sidecars used over their last minute, summed.',
                    minimum: 0,
                  }),
                  wanted: Type.Number({
                    description:
                      'Tokens they wanted over their last minute (used, refused and waiting), summed.',
                    minimum: 0,
                  }),
                },
                {
                  description: 'The budget in tokens per minute, and the fleet’s use and demand.',
                  additionalProperties: false,
                },
              ),
            ),
          },
          {
            description: 'One budget of spec.flowControl and the fleet’s use of it.',
            additionalProperties: false,
          },
        ),
        {
          description:
            'The budgets of spec.flowControl, each with the fleet’s use and demand per minute as the sidecars last reported (docs/flow-control.md, Budgets across the fleet). Unset when the pool has none.',
          maxItems: 1000,
          'x-kubernetes-list-type': 'map',
          'x-kubernetes-list-map-keys': ['id'],
        },
      ),
    ),
    endpointHealth: Type.Optional(
      Type.Array(
        Type.Object(
          {
            id: Type.String({
              description: 'Endpoint id: backend/host:port.',
              minLength: 1,
              maxLength: 512,
            }),
            breakerOpen: Type.Integer({
              description: 'Connected sidecars that report its circuit breaker open.',
              minimum: 0,
              format: 'int32',
            }),
            halfOpen: Type.Integer({
              description: 'Connected sidecars that report its breaker half-open (probing).',
              minimum: 0,
              format: 'int32',
            }),
            reporting: Type.Integer({
              description:
                'Connected sidecars that sent a health report (the denominator of breakerOpen).',
              minimum: 0,
              format: 'int32',
            }),
            errorPercent: Type.Optional(
              Type.Integer({
                description:
                  'Errors among its requests in the sidecars’ health windows, in percent, averaged over the sidecars of this replica that report it.',
                minimum: 0,
                maximum: 100,
                format: 'int32',
              }),
            ),
            rateLimitPercent: Type.Optional(
              Type.Integer({
                description: '429 answers among its requests, in percent, averaged likewise.',
                minimum: 0,
                maximum: 100,
                format: 'int32',
              }),
            ),
            ewmaTtftMs: Type.Optional(
              Type.Integer({
                description:
                  'Median over those sidecars of their smoothed time to first token for it, in ms (two significant digits).',
                minimum: 0,
                format: 'int64',
              }),
            ),
            driftMismatches: Type.Optional(
              Type.Integer({
                description:
                  'Responses that contradicted its drift probe (another model or system_fingerprint), summed over those sidecars.',
                minimum: 0,
                format: 'int64',
              }),
            ),
          },
          {
            description: 'One endpoint as the connected sidecars see it.',
            additionalProperties: false,
          },
        ),
        {
          description:
            'How the fleet of sidecars sees the endpoints: each endpoint that at least one connected sidecar reports with an open or half-open circuit breaker, or with errors or 429s on at least 5 % of its requests, or with drift mismatches, worst first (at most 32). Empty when every sidecar sees every endpoint healthy.',
          maxItems: 32,
          'x-kubernetes-list-type': 'map',
          'x-kubernetes-list-map-keys': ['id'],
        },
      ),
    ),
  },
  {
    description: 'Observed state of the pool, written by the controller.',
    additionalProperties: false,
  },
);

// ---------------------------------------------------------------------------------------------
// The whole resource / pool file
// ---------------------------------------------------------------------------------------------

export const MetadataSchema = Type.Object(
  {
    name: Type.String({
      description:
        'Name of the pool, unique in its namespace: a DNS subdomain, at most 253 characters.',
      minLength: 1,
      maxLength: 253,
      pattern: DNS_SUBDOMAIN,
      errorMessage:
        'must be a name of lower-case letters, digits, "-" and ".", starting and ending with a letter or digit, like chat',
    }),
    namespace: Type.Optional(
      Type.String({
        description: 'Namespace of the pool. A pool file may leave it out.',
        minLength: 1,
        maxLength: 63,
        pattern: DNS_LABEL,
        errorMessage:
          'must be a namespace name: lower-case letters, digits and "-", starting and ending with a letter or digit',
      }),
    ),
  },
  {
    description:
      'Standard object metadata. A pool file needs only name; other fields (labels, annotations, ...) are kept as they are.',
  },
);

export const InferencePoolSchema = Type.Object(
  {
    apiVersion: Type.Literal(API_VERSION, {
      description: `Versioned schema of this object: ${API_VERSION}.`,
    }),
    kind: Type.Literal(KIND, { description: `Kind of this object: ${KIND}.` }),
    metadata: MetadataSchema,
    spec: InferencePoolSpecSchema,
    status: Type.Optional(InferencePoolStatusSchema),
  },
  {
    description:
      'InferencePool is a set of backends serving OpenAI-compatible LLM inference, and the policy with which the switchyard sidecar in every application pod balances, fails over and retries requests across them.',
    additionalProperties: false,
  },
);

export type InferencePool = Static<typeof InferencePoolSchema>;
export type InferencePoolSpec = Static<typeof InferencePoolSpecSchema>;
export type InferencePoolStatus = Static<typeof InferencePoolStatusSchema>;
export type Backend = Static<typeof BackendSchema>;
export type Alias = Static<typeof AliasSchema>;
export type BackendTls = Static<typeof BackendTlsSchema>;
export type Affinity = Static<typeof AffinitySchema>;
export type Health = Static<typeof HealthSchema>;
export type Retry = Static<typeof RetrySchema>;
export type ColdStart = Static<typeof ColdStartSchema>;
export type Timeouts = Static<typeof TimeoutsSchema>;
export type Drift = Static<typeof DriftSchema>;
export type FlowControl = Static<typeof FlowControlSchema>;
export type Budget = Static<typeof BudgetSchema>;
export type Condition = Static<typeof ConditionSchema>;
