/**
 * The endpoints besides the OpenAI API that vLLM serves and that routers built for vLLM call on
 * their workers before and while they route (what SMG and vllm-router were seen calling):
 *
 * - `GET /health`: 200 with an empty body, as vLLM answers (SMG registers no worker without it;
 *   vllm-router does not start until every worker answers it).
 * - `GET /version`: `{"version": …}` (SMG tells a vLLM worker from a generic one by it, and only
 *   polls a vLLM worker's `/metrics`).
 * - `GET /load`: `{"server_load": n}`, requests in the engine.
 * - `POST /tokenize`, `POST /detokenize`, `POST /v1/chat/completions/render`: the simulator's
 *   stand-in tokenizer (every `charsPerToken` characters are one token, its id a hash of them),
 *   in vLLM's shapes. vllm-router's `cache_aware` tokenizes every request on its workers and matches
 *   token ids; equal text gives equal ids here, as with a real tokenizer.
 */
import type { ServerResponse } from 'node:http';
import type { SimOptions } from '../options.ts';
import type { Simulator } from '../simulator.ts';
import { hashString32 } from '../engine/hash.ts';
import { badRequest, isApiError } from './api-error.ts';
import { reportedMaxModelLen } from './models.ts';
import { parseGeneration } from './openai-wire.ts';
import { sendError, sendJson } from './respond.ts';
import type { Route } from './route.ts';

/** The vLLM release whose API the simulator follows (docs/engine.md). */
export const IMITATED_VLLM_VERSION = '0.32.0';

/** A vocabulary of this many ids: `hash(text of a token) mod VOCAB`. */
const VOCAB = 32_000;

/** The stand-in tokenizer: one token per `charsPerToken` characters, its id a hash of them. */
export function tokenIds(text: string, o: Pick<SimOptions, 'charsPerToken'>): number[] {
  const ids: number[] = [];
  const step = Math.max(1, Math.round(o.charsPerToken));
  for (let i = 0; i < text.length; i += step)
    ids.push(hashString32(text.slice(i, i + step)) % VOCAB);
  return ids;
}

export function vllmExtraRoutes(sim: Simulator): Route[] {
  const tokenized = (ex: { res: ServerResponse }, text: string) => {
    const tokens = tokenIds(text, sim.options());
    sendJson(ex.res, 200, {
      count: tokens.length,
      max_model_len: reportedMaxModelLen(sim.options()),
      tokens,
      token_strs: null,
    });
  };
  return [
    {
      kind: 'read',
      path: '/health',
      handle: ({ res }) => {
        res.writeHead(200, { 'content-length': '0' });
        res.end();
      },
    },
    {
      kind: 'read',
      path: '/version',
      handle: ({ res }) => sendJson(res, 200, { version: IMITATED_VLLM_VERSION }),
    },
    {
      kind: 'read',
      path: '/load',
      handle: ({ res }) => {
        const load = sim.engine.load();
        sendJson(res, 200, { server_load: load.running + load.waiting });
      },
    },
    {
      kind: 'json',
      path: '/tokenize',
      inference: false,
      handle: (ex, body) => {
        const kind =
          typeof body === 'object' && body !== null && 'messages' in body ? 'chat' : 'completion';
        const parsed = parseGeneration(kind, body);
        if (isApiError(parsed)) return sendError(ex.res, parsed);
        tokenized(ex, parsed.promptText);
      },
    },
    {
      kind: 'json',
      path: '/detokenize',
      inference: false,
      handle: ({ res }, body) => {
        const tokens = (body as { tokens?: unknown } | null)?.tokens;
        if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t))) {
          return sendError(res, badRequest('tokens must be an array of token ids', 'tokens'));
        }
        // The stand-in tokenizer cannot invert its hash: one placeholder word per token.
        sendJson(res, 200, { prompt: tokens.map((t) => `t${String(t)}`).join(' ') });
      },
    },
    {
      kind: 'json',
      path: '/v1/chat/completions/render',
      inference: false,
      handle: ({ res }, body) => {
        const parsed = parseGeneration('chat', body);
        if (isApiError(parsed)) return sendError(res, parsed);
        sendJson(res, 200, {
          request_id: `render-sim${sim.port}-${sim.nextSeq()}`,
          token_ids: tokenIds(parsed.promptText, sim.options()),
        });
      },
    },
  ];
}
