/**
 * The raw HTTP samples scripts/engine/capture-fixtures.sh records from a real vLLM
 * (test/engine/fixtures/*.http): the request line, its headers, its body (a long one shortened to
 * its first 300 characters and its length), `--- response`, then the response as curl printed it
 * (status line, headers without `date`, blank line, body verbatim).
 */

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  /** Header names in lower case. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body as recorded; undefined when there was none. */
  readonly body: string | undefined;
  /** The length of the body sent when the recording shortened it (`… (N characters in all)`). */
  readonly shortenedFrom: number | undefined;
}

export interface RecordedResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

export interface HttpFixture {
  readonly request: RecordedRequest;
  readonly response: RecordedResponse;
}

const SEPARATOR = '\n--- response\n';
const SHORTENED = /… \((\d+) characters in all\)$/;

/** Header lines up to the first empty line, and the rest. */
function headerBlock(lines: readonly string[]): { headers: Record<string, string>; rest: number } {
  const headers: Record<string, string> = {};
  let i = 0;
  for (; i < lines.length && lines[i] !== ''; i++) {
    const line = lines[i] as string;
    const colon = line.indexOf(':');
    if (colon <= 0) throw new Error(`not a header line: ${JSON.stringify(line)}`);
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { headers, rest: i + 1 };
}

/** The response part alone: status line, headers, blank line, body (metrics.txt is only that). */
export function parseRecordedResponse(text: string): RecordedResponse {
  const lines = text.split('\n');
  const status = /^HTTP\/[\d.]+ (\d{3})/.exec(lines[0] ?? '');
  if (status === null) throw new Error(`not a status line: ${JSON.stringify(lines[0])}`);
  const { headers, rest } = headerBlock(lines.slice(1));
  return {
    status: Number(status[1]),
    headers,
    body: lines.slice(1 + rest).join('\n'),
  };
}

export function parseHttpFixture(text: string): HttpFixture {
  const at = text.indexOf(SEPARATOR);
  if (at < 0) throw new Error('no "--- response" line');
  const lines = text.slice(0, at).split('\n');
  const requestLine = /^([A-Z]+) (\S+)$/.exec(lines[0] ?? '');
  if (requestLine === null) throw new Error(`not a request line: ${JSON.stringify(lines[0])}`);
  const { headers, rest } = headerBlock(lines.slice(1));
  const bodyText = lines
    .slice(1 + rest)
    .join('\n')
    .trim();
  const shortened = SHORTENED.exec(bodyText);
  return {
    request: {
      method: requestLine[1] as string,
      path: requestLine[2] as string,
      headers,
      body:
        bodyText === ''
          ? undefined
          : shortened === null
            ? bodyText
            : bodyText.slice(0, shortened.index),
      shortenedFrom: shortened === null ? undefined : Number(shortened[1]),
    },
    response: parseRecordedResponse(text.slice(at + SEPARATOR.length)),
  };
}
