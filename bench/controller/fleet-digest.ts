/**
 * A short digest of a snapshot's endpoint set, computed by the subscriber hosts from what a
 * client applied and by the bench from the fixture, so a line per snapshot stays short.
 */
import { createHash } from 'node:crypto';

export function keyDigest(key: string): string {
  return createHash('sha1').update(key).digest('base64url').slice(0, 12);
}
