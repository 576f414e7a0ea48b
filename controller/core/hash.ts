/**
 * The content hash of snapshots: the pure functions are in crds/content-hash.ts, shared with the
 * sidecar (it checks the endpoint lists it builds from deltas with the same hash).
 */
export { canonicalJson, compareStrings, contentHash, fnv1a64Hex } from '../../crds/content-hash.ts';
