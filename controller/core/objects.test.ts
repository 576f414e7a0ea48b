import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1EndpointSlice, V1Pod, V1Secret, V1Service } from '@kubernetes/client-node';
import type { EndpointSlice, Pod, Secret, Service } from './objects.ts';

// Compile-time proof that the shell can pass the client's objects as they are: if a field here
// stops matching @kubernetes/client-node, `tsc` fails on these lines.
type Assignable<From, To> = [From] extends [To] ? true : false;
const serviceFits: Assignable<V1Service, Service> = true;
const sliceFits: Assignable<V1EndpointSlice, EndpointSlice> = true;
const secretFits: Assignable<V1Secret, Secret> = true;
const podFits: Assignable<V1Pod, Pod> = true;

test('accepts the objects of @kubernetes/client-node', () => {
  assert.deepEqual([serviceFits, sliceFits, secretFits, podFits], [true, true, true, true]);
});
