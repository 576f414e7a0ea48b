import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { test } from 'node:test';
import { ConnectionQueue } from './client-request.ts';

/** A stand-in for a client socket: `destroyed`, and `close` when it goes. */
class FakeConnection extends EventEmitter {
  destroyed = false;
  close(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

const never = (): void => assert.fail('refused');

test('runs one connection’s requests one after the other, in order', () => {
  const queue = new ConnectionQueue();
  const connection = new FakeConnection();
  const ran: number[] = [];
  for (let i = 0; i < 3; i++) queue.enqueue(connection, () => ran.push(i), never);
  assert.deepEqual(ran, [0]);
  queue.done(connection);
  assert.deepEqual(ran, [0, 1]);
  queue.done(connection);
  queue.done(connection);
  assert.deepEqual(ran, [0, 1, 2]);
  // Idle again: the next request runs at once, and the connection still has one close listener.
  queue.enqueue(connection, () => ran.push(3), never);
  assert.deepEqual(ran, [0, 1, 2, 3]);
  assert.equal(connection.listenerCount('close'), 1);
});

test('requests that finish within their own run start the next from a loop, never by recursion', () => {
  // Issue 40: 3,000 queued requests of a client that left overflowed the stack.
  const queue = new ConnectionQueue(1_000_000);
  const connection = new FakeConnection();
  let ran = 0;
  const finishAtOnce = (): void => {
    ran++;
    queue.done(connection);
  };
  queue.enqueue(connection, () => ran++, never);
  for (let i = 0; i < 20_000; i++) queue.enqueue(connection, finishAtOnce, never);
  queue.done(connection);
  assert.equal(ran, 20_001);
  assert.equal(queue.waiting(connection), 0);
  queue.enqueue(connection, () => ran++, never);
  assert.equal(ran, 20_002, 'idle again afterwards');
});

test('past the limit, the first excess request is refused in its turn and later ones dropped', () => {
  const queue = new ConnectionQueue(2);
  const connection = new FakeConnection();
  const ran: string[] = [];
  const queued = ['a', 'b', 'c', 'd', 'e'].map((name) =>
    queue.enqueue(
      connection,
      () => ran.push(name),
      () => ran.push(`refused ${name}`),
    ),
  );
  assert.deepEqual(queued, [true, true, true, false, false]);
  for (let i = 0; i < 5; i++) queue.done(connection);
  assert.deepEqual(ran, ['a', 'b', 'c', 'refused d']);
});

test('a connection that closes drops its whole queue at once', () => {
  const queue = new ConnectionQueue();
  const connection = new FakeConnection();
  const ran: number[] = [];
  for (let i = 0; i < 5; i++) queue.enqueue(connection, () => ran.push(i), never);
  assert.equal(queue.waiting(connection), 4);
  connection.close();
  assert.equal(queue.waiting(connection), 0);
  queue.done(connection);
  assert.deepEqual(ran, [0]);
  assert.equal(
    queue.enqueue(connection, () => ran.push(9), never),
    false,
    'nothing runs on a closed connection',
  );
});
