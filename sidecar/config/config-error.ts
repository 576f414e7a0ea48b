/**
 * The pool file a standalone sidecar starts with is not valid (the message lists every problem).
 * In a file of its own so that the CLI can test for it without loading the pool-file reader (YAML
 * and the InferencePool validator), which a sidecar fed by the controller never needs.
 */
export class ConfigError extends Error {
  readonly code = 'SY_INVALID_POOL_FILE';
}
