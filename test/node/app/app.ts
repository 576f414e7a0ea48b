/**
 * The application of test/node/: what a user's app does, in its own image (node:24-bookworm-slim
 * and the official `openai` client, nothing of switchyard). It calls $OPENAI_BASE_URL, which the
 * webhook set to its sidecar, and prints one JSON line per event for the test to read from
 * `kubectl logs`.
 *
 *   node app.ts traffic        a request every 100 ms (alternately streamed), a line per failure
 *                              and a summary line every 2 s, until stopped
 *   node app.ts idle           nothing after the start line
 *   node app.ts streams <n>    n concurrent streamed completions, the first at the app's first
 *                              instant, the rest 50 every 250 ms; a line
 *                              when each has its first chunk or failed, one when all have ended,
 *                              progress every 5 s; then idle
 *
 * Every mode first prints a `start` line: OPENAI_BASE_URL, and whether the sidecar was already
 * ready (its /readyz on 127.0.0.1) at the app's first instant.
 */
import OpenAI from 'openai';

const [mode = 'idle', arg = '1'] = process.argv.slice(2);
const print = (line: Record<string, unknown>): void => {
  process.stdout.write(JSON.stringify({ at: new Date().toISOString(), ...line }) + '\n');
};

async function sidecarReady(): Promise<number | string> {
  try {
    return (await fetch('http://127.0.0.1:9090/readyz')).status;
  } catch (error) {
    return (error as Error).message;
  }
}

const readyz = await sidecarReady();
print({ kind: 'start', mode, baseUrl: process.env.OPENAI_BASE_URL ?? null, readyz });
// The key is the sidecar's business (the pool's Secret); the client insists on one.
const client = new OpenAI({ apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const messages = [{ role: 'user' as const, content: 'Say hello to the node test.' }];

async function once(stream: boolean, maxTokens: number): Promise<void> {
  if (!stream) {
    await client.chat.completions.create({ model: 'm', messages, max_tokens: maxTokens });
    return;
  }
  const chunks = await client.chat.completions.create({
    model: 'm',
    messages,
    max_tokens: maxTokens,
    stream: true,
  });
  for await (const _ of chunks) {
    // drain
  }
}

if (mode === 'traffic') {
  let ok = 0;
  let failed = 0;
  let i = 0;
  setInterval(() => print({ kind: 'summary', ok, failed }), 2_000);
  for (;;) {
    const started = Date.now();
    try {
      await once(i++ % 2 === 0, 4);
      ok++;
    } catch (error) {
      failed++;
      print({ kind: 'failure', error: (error as Error).message });
    }
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, 100 - (Date.now() - started))));
  }
} else if (mode === 'streams') {
  // No waiting for the sidecar: its startup probe (/startupz) holds the app back until it has a
  // pool, so requests from the app's first instant must be routed. They are opened 50 every
  // 250 ms rather than all 1,000 in one go: a single burst on this shared 2-core machine left
  // some requests' heads unread past the sidecar's 10 s head timeout (408), which measures the
  // machine's load, not what this test is after (1,000 streams held, the sidecar's memory).
  const n = Number(arg);
  let first = 0;
  let ok = 0;
  let failed = 0;
  const errors = new Set<string>();
  // `streams-open` once every stream has its first chunk or has failed (the test checks which).
  const settled = (): void => {
    if (first + failed === n) print({ kind: 'streams-open', n, open: first, failed });
  };
  const progress = setInterval(
    () => print({ kind: 'progress', open: first, ok, failed, errors: [...errors].slice(0, 5) }),
    5_000,
  );
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      let seen = false;
      await new Promise((resolve) => setTimeout(resolve, Math.floor(i / 50) * 250));
      try {
        const chunks = await client.chat.completions.create({
          model: 'm',
          messages,
          max_tokens: 40,
          stream: true,
        });
        for await (const _ of chunks) {
          if (seen) continue;
          seen = true;
          first++;
          settled();
        }
        ok++;
      } catch (error) {
        errors.add((error as Error).message);
        if (!seen) {
          failed++;
          settled();
        } else failed++;
      }
    }),
  );
  clearInterval(progress);
  print({ kind: 'streams-done', n, ok, failed, errors: [...errors].slice(0, 5) });
}
setInterval(() => undefined, 60_000);
