import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { SseEventTooLargeError, SseParser, type SseEvent } from './sse-parser.ts';

function parse(chunks: readonly string[], maxEventSize?: number) {
  const events: SseEvent[] = [];
  const comments: string[] = [];
  const parser = new SseParser(
    { onEvent: (e) => events.push(e), onComment: (c) => comments.push(c) },
    maxEventSize,
  );
  for (const chunk of chunks) parser.push(chunk);
  return { events, comments, parser };
}

describe('SseParser', () => {
  test('event, data and id fields; a blank line dispatches', () => {
    const { events } = parse(['event: snapshot\nid: 7\ndata: {"a":1}\n\n']);
    assert.deepEqual(events, [{ type: 'snapshot', data: '{"a":1}', id: '7' }]);
  });

  test('multi-line data is joined with \\n; the default type is message', () => {
    const { events } = parse(['data: one\ndata:two\ndata\ndata:  four\n\n']);
    assert.deepEqual(events, [{ type: 'message', data: 'one\ntwo\n\n four', id: undefined }]);
  });

  test('comments are reported and dispatch nothing', () => {
    const { events, comments } = parse([': heartbeat\n\n:x\n\n']);
    assert.deepEqual(events, []);
    assert.deepEqual(comments, ['heartbeat', 'x']);
  });

  test('CRLF and lone CR end lines, also when split across chunks', () => {
    const { events } = parse(['event: a\r', '\ndata: 1\r', '\r', '\n', 'data: 2\r\r']);
    assert.deepEqual(
      events.map((e) => [e.type, e.data]),
      [
        ['a', '1'],
        ['message', '2'],
      ],
    );
  });

  test('an unterminated event at the end of the stream is not dispatched', () => {
    const { events } = parse(['data: done\n\ndata: half\n']);
    assert.deepEqual(
      events.map((e) => e.data),
      ['done'],
    );
  });

  test('a block without data dispatches nothing and resets the type', () => {
    const { events } = parse(['event: snapshot\n\ndata: x\n\n']);
    assert.deepEqual(events, [{ type: 'message', data: 'x', id: undefined }]);
  });

  test('a leading BOM is skipped; ids persist; retry and unknown fields', () => {
    const { events, parser } = parse(['\ufeffid: 3\nretry: 250\nfoo: bar\ndata: a\n\ndata: b\n\n']);
    assert.deepEqual(
      events.map((e) => [e.id, e.data]),
      [
        ['3', 'a'],
        ['3', 'b'],
      ],
    );
    assert.equal(parser.retryMs, 250);
    assert.equal(parser.lastEventId, '3');
  });

  test('an event past the size cap throws, whether in one line or many', () => {
    assert.throws(() => parse(['data: ' + 'x'.repeat(200)], 100), SseEventTooLargeError);
    assert.doesNotThrow(() => parse(Array.from({ length: 30 }, () => 'data: 12345\n')));
    assert.throws(
      () =>
        parse(
          Array.from({ length: 30 }, () => 'data: 12345\n'),
          100,
        ),
      SseEventTooLargeError,
    );
    // Under the cap per event, however long the stream.
    const { events } = parse(
      Array.from({ length: 50 }, () => 'data: 12345\n\n'),
      100,
    );
    assert.equal(events.length, 50);
  });

  test('property: chunk boundaries anywhere and any line ending give the same events', () => {
    const line = fc.string({ maxLength: 12 }).map((s) => s.replace(/[\r\n]/g, ''));
    const eventArb = fc.record({
      type: fc.constantFrom('snapshot', 'message', 'other'),
      data: fc.array(line, { minLength: 1, maxLength: 4 }),
      comment: fc.option(line, { nil: undefined }),
    });
    fc.assert(
      fc.property(
        fc.array(eventArb, { maxLength: 6 }),
        fc.constantFrom('\n', '\r\n', '\r'),
        fc.array(fc.nat(), { maxLength: 8 }),
        (events, eol, cuts) => {
          const text = events
            .map(
              (e) =>
                (e.comment === undefined ? '' : `:${e.comment}${eol}`) +
                `event: ${e.type}${eol}` +
                e.data.map((d) => `data: ${d}${eol}`).join('') +
                eol,
            )
            .join('');
          const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
          const chunks: string[] = [];
          let at = 0;
          for (const p of points) {
            chunks.push(text.slice(at, p));
            at = p;
          }
          chunks.push(text.slice(at));
          const got = parse(chunks).events.map((e) => [e.type, e.data]);
          assert.deepEqual(
            got,
            events.map((e) => [e.type, e.data.join('\n')]),
          );
        },
      ),
      { numRuns: 500 },
    );
  });
});
