import { Transform, type TransformCallback } from 'node:stream';

/**
 * A request body passed through as it arrives (multipart uploads, which the sidecar never parses
 * or holds whole), counted against the body limit on the way: past `limitBytes` nothing more is
 * passed on and `onTooLarge` is called once, so the proxy can answer 413 and end the upstream
 * request. A declared Content-Length over the limit is refused before any byte is sent.
 */
export class LimitedBody extends Transform {
  readonly #limitBytes: number;
  readonly #onTooLarge: () => void;
  #bytes = 0;
  #over = false;

  constructor(limitBytes: number, onTooLarge: () => void) {
    super();
    this.#limitBytes = limitBytes;
    this.#onTooLarge = onTooLarge;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.#over) return done();
    this.#bytes += chunk.length;
    if (this.#bytes > this.#limitBytes) {
      this.#over = true;
      this.#onTooLarge();
      return done();
    }
    done(null, chunk);
  }
}
