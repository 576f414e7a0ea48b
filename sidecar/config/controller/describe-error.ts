/**
 * Error details that are safe to log: a code and a message (no stack, no request). The controller
 * client's requests carry a bearer token and its snapshots API keys; neither is in these fields.
 */
export function describeError(err: unknown): { code?: string; message: string } {
  if (typeof err !== 'object' || err === null) return { message: String(err) };
  const e = err as NodeJS.ErrnoException;
  return e.code === undefined
    ? { message: String(e.message ?? err) }
    : { code: e.code, message: String(e.message) };
}
