/**
 * What the simulated model says to an embeddings request: deterministic unit vectors.
 */
import { mulberry32 } from '../../lib/rng.ts';
import { hashString32 } from './hash.ts';

/** A deterministic unit vector for `text`: the same text and seed give the same vector. */
export function embeddingVector(text: string, dimensions: number, seed: number): Float32Array {
  const rng = mulberry32((hashString32(text) ^ seed) >>> 0);
  const v = new Float32Array(dimensions);
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    const x = rng() * 2 - 1;
    v[i] = x;
    norm += x * x;
  }
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < dimensions; i++) v[i] = v[i]! * scale;
  return v;
}
