/**
 * The shape of a server-sent event stream, for the calibration against vLLM: which kinds of event
 * come in which order, and the shape of each kind (shape-diff.ts). An OpenAI chunk's kind says
 * what it carries (`role`, `content`, `finish`, `usage`: `role`, `content`, `content+finish`,
 * ...), a named event's kind is its name (`response.output_text.delta`), and `[DONE]` is itself.
 * A run of one kind counts once (`content` stands for one content chunk or many), so two streams
 * of different lengths, or that group tokens differently into chunks, have the same sequence. The chunks of each choice of an `n > 1` stream form a lane of their own, as the
 * interleaving of choices depends on timing; what belongs to no choice (usage, `[DONE]`, named
 * events) is the last lane.
 */
import { shapeDiff } from './shape-diff.ts';
import type { ShapeDiffOptions, ShapeDifference } from './shape-diff.ts';

export interface SseEvent {
  /** The `event:` field, when the event has one. */
  readonly event: string | undefined;
  /** The `data:` lines, joined by newlines. */
  readonly data: string;
}

/** The events of a stream's text (`\r\n` or `\n` lines; comments and empty events skipped). */
export function parseSse(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.replace(/\r\n/g, '\n').split(/\n\n+/)) {
    let event: string | undefined;
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (event !== undefined || data.length > 0) events.push({ event, data: data.join('\n') });
  }
  return events;
}

/** One event as the comparison sees it. */
export interface ClassifiedEvent {
  /** A choice's index, or '' for what belongs to no choice. */
  readonly lane: string;
  readonly kind: string;
  /** The parsed data; undefined for `[DONE]` and data that is not JSON. */
  readonly json: unknown;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The kind of an OpenAI chunk's only choice: what it carries, joined by `+`. */
function choiceKind(choice: Record<string, unknown>): string {
  const delta = choice['delta'];
  const parts: string[] = [];
  const text = isRecord(delta) ? delta['content'] : choice['text'];
  if (isRecord(delta) && typeof delta['role'] === 'string') parts.push('role');
  if (typeof text === 'string' && text !== '') parts.push('content');
  const finish = choice['finish_reason'];
  if (finish !== null && finish !== undefined) parts.push('finish');
  return parts.length === 0 ? 'nothing' : parts.join('+');
}

export function classifyEvent(e: SseEvent): ClassifiedEvent {
  if (e.data === '[DONE]') return { lane: '', kind: '[DONE]', json: undefined };
  let json: unknown;
  try {
    json = JSON.parse(e.data);
  } catch {
    return { lane: '', kind: `unparsable ${e.event ?? 'data'}`, json: undefined };
  }
  if (e.event !== undefined) return { lane: '', kind: e.event, json };
  if (!isRecord(json) || !Array.isArray(json['choices'])) return { lane: '', kind: 'data', json };
  const choices = json['choices'] as unknown[];
  if (choices.length === 0)
    return { lane: '', kind: 'usage' in json ? 'usage' : 'no choice', json };
  const [choice] = choices;
  if (choices.length > 1 || !isRecord(choice)) return { lane: '', kind: 'many choices', json };
  return { lane: String(choice['index']), kind: choiceKind(choice), json };
}

/** The lanes' sequences, e.g. `0: role, content, content+finish` and `-: usage, [DONE]`. */
export function streamSequence(events: readonly ClassifiedEvent[]): string[] {
  const lanes = new Map<string, string[]>();
  for (const e of events) {
    const kinds = lanes.get(e.lane) ?? [];
    lanes.set(e.lane, kinds);
    if (kinds.at(-1) !== e.kind) kinds.push(e.kind);
  }
  const names = [...lanes.keys()].sort((a, b) =>
    a === '' ? 1 : b === '' ? -1 : Number(a) - Number(b),
  );
  return names.map((lane) => `${lane === '' ? '-' : lane}: ${(lanes.get(lane) ?? []).join(', ')}`);
}

/**
 * The differences between two streams: their sequences (one `sequence` difference per lane that
 * differs), then, for every kind both have, each of the actual events of that kind against the
 * first expected one (paths prefixed with `<kind>`), each difference once.
 */
export function streamDiff(
  expectedText: string,
  actualText: string,
  options: ShapeDiffOptions = {},
): ShapeDifference[] {
  const expected = parseSse(expectedText).map(classifyEvent);
  const actual = parseSse(actualText).map(classifyEvent);
  const out: ShapeDifference[] = [];
  const es = streamSequence(expected);
  const as = streamSequence(actual);
  for (let i = 0; i < Math.max(es.length, as.length); i++) {
    if (es[i] !== as[i]) {
      out.push({
        path: '<sequence>',
        kind: 'value',
        expected: es[i] ?? '(no lane)',
        actual: as[i] ?? '(no lane)',
      });
    }
  }
  const firstOfKind = new Map<string, unknown>();
  for (const e of expected) if (!firstOfKind.has(e.kind)) firstOfKind.set(e.kind, e.json);
  const seen = new Set<string>();
  for (const a of actual) {
    const e = firstOfKind.get(a.kind);
    if (e === undefined || a.json === undefined) continue; // a kind the sequence already reports, or `[DONE]`
    for (const d of shapeDiff(e, a.json, options, `<${a.kind}>`)) {
      const key = `${d.path}\u0000${d.kind}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push(d);
    }
  }
  return out;
}
