/**
 * The passive drift check (docs/drift.md): does a response say it comes from another model or
 * build than the endpoint's drift probe saw? It reads `model` and `system_fingerprint` from the
 * start of the body (the first chunk of a stream carries both, like the whole of a short JSON
 * answer), at most SCAN_BYTES, and never holds the response back.
 */
import { responseMismatches } from '../../crds/drift.ts';
import type { EndpointProbe } from '../../crds/policy-types.ts';

/** How much of a body is looked at: enough for the first SSE chunk or a completion's head. */
export const SCAN_BYTES = 4096;

const MODEL = /"model"\s*:\s*"((?:[^"\\]|\\.)*)"/;
const FINGERPRINT = /"system_fingerprint"\s*:\s*"((?:[^"\\]|\\.)*)"/;

export class PassiveDriftCheck {
  readonly #probe: EndpointProbe;
  #text = '';
  #done = false;

  constructor(probe: EndpointProbe) {
    this.#probe = probe;
  }

  /** Feeds a body chunk; answers once, true for a mismatch, then undefined for every later chunk. */
  feed(chunk: Buffer): boolean | undefined {
    if (this.#done) return undefined;
    this.#text += chunk.toString(
      'latin1',
      0,
      Math.min(chunk.length, SCAN_BYTES - this.#text.length),
    );
    const model = MODEL.exec(this.#text)?.[1];
    const systemFingerprint = FINGERPRINT.exec(this.#text)?.[1];
    const complete =
      model !== undefined &&
      (this.#probe.systemFingerprint === undefined || systemFingerprint !== undefined);
    if (!complete && this.#text.length < SCAN_BYTES) return undefined;
    this.#done = true;
    return responseMismatches(this.#probe, { model, systemFingerprint });
  }
}
