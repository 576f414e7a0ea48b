/**
 * A Server-Sent Events parser (the `text/event-stream` format of the WHATWG HTML standard, §9.2.6)
 * for the controller's snapshot stream. Fed decoded text in chunks split anywhere; lines end in
 * LF, CRLF or CR (a CRLF split across two chunks is one line end); a blank line dispatches the
 * event; `data:` lines are joined with `\n`; `:` lines are comments; an incomplete event at the
 * end of the stream is never dispatched.
 */

export interface SseEvent {
  /** The `event:` field, `message` when none was given. */
  type: string;
  /** The `data:` lines joined with `\n`. */
  data: string;
  /** The last `id:` seen on the stream so far (the SSE "last event ID"). */
  id: string | undefined;
}

export interface SseHandlers {
  onEvent(event: SseEvent): void;
  /** A comment line (`: heartbeat`), without the colon and one leading space. */
  onComment?(text: string): void;
}

/** 16 MiB: far above any real pool, small enough that a broken stream cannot exhaust memory. */
export const DEFAULT_MAX_EVENT_SIZE = 16 * 1024 * 1024;

/** Thrown by `push` when one event (or one line) grows past the size cap. */
export class SseEventTooLargeError extends Error {
  readonly code = 'SY_SSE_EVENT_TOO_LARGE';
}

export class SseParser {
  private readonly handlers: SseHandlers;
  /** In UTF-16 code units, which is at most the UTF-8 size: the cap is never stricter than bytes. */
  private readonly maxEventSize: number;
  private partial = '';
  private data: string[] = [];
  private dataSize = 0;
  private type = '';
  private lastId: string | undefined;
  private retry: number | undefined;
  private started = false;
  /** The previous chunk ended in CR: a LF starting this one belongs to that line end. */
  private skipLeadingLF = false;

  constructor(handlers: SseHandlers, maxEventSize = DEFAULT_MAX_EVENT_SIZE) {
    this.handlers = handlers;
    this.maxEventSize = maxEventSize;
  }

  /** The last `id:` seen (the value a reconnecting client may send as `Last-Event-ID`). */
  get lastEventId(): string | undefined {
    return this.lastId;
  }

  /** The last valid `retry:` field, in ms. */
  get retryMs(): number | undefined {
    return this.retry;
  }

  /** Feeds decoded text; dispatches every event completed by it, in order. */
  push(text: string): void {
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    let start = 0;
    if (this.skipLeadingLF && text.length > 0) {
      this.skipLeadingLF = false;
      if (text.charCodeAt(0) === 10) start = 1;
    }
    // A fresh regex per call: `lastIndex` is state, and a handler may push into another parser.
    const lineEnd = /[\r\n]/g;
    lineEnd.lastIndex = start;
    for (let match = lineEnd.exec(text); match !== null; match = lineEnd.exec(text)) {
      const end = match.index;
      const line =
        this.partial.length === 0 ? text.slice(start, end) : this.partial + text.slice(start, end);
      this.partial = '';
      start = end + 1;
      if (text.charCodeAt(end) === 13) {
        if (start === text.length) this.skipLeadingLF = true;
        else if (text.charCodeAt(start) === 10) start += 1;
      }
      lineEnd.lastIndex = start;
      this.line(line);
    }
    if (start < text.length) {
      this.partial += text.slice(start);
      if (this.partial.length + this.dataSize > this.maxEventSize) this.tooLarge();
    }
  }

  private tooLarge(): never {
    this.partial = '';
    this.data = [];
    this.dataSize = 0;
    throw new SseEventTooLargeError(
      `an event of the stream is larger than ${this.maxEventSize} characters`,
    );
  }

  private line(line: string): void {
    if (line.length === 0) return this.dispatch();
    const colon = line.indexOf(':');
    if (colon === 0) {
      this.handlers.onComment?.(line.charCodeAt(1) === 32 ? line.slice(2) : line.slice(1));
      return;
    }
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    switch (field) {
      case 'event':
        this.type = value;
        break;
      case 'data':
        this.dataSize += value.length + 1;
        if (this.dataSize > this.maxEventSize) this.tooLarge();
        this.data.push(value);
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      case 'retry':
        if (/^[0-9]+$/.test(value)) this.retry = Number(value);
        break;
      default:
      // Unknown fields are ignored (the standard says so: room for extensions).
    }
  }

  private dispatch(): void {
    const { data, type } = this;
    this.data = [];
    this.dataSize = 0;
    this.type = '';
    // No `data:` line: nothing to dispatch (an `event:`-only block is dropped, as browsers do).
    if (data.length === 0) return;
    this.handlers.onEvent({ type: type || 'message', data: data.join('\n'), id: this.lastId });
  }
}
