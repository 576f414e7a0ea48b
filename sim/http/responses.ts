/**
 * The Responses API: `POST /v1/responses` (streamed or not), and the stored responses behind
 * `GET /v1/responses/{id}`, `POST /v1/responses/{id}/cancel` and `previous_response_id`.
 *
 * The simulator stores what it answers (vLLM does with `VLLM_ENABLE_RESPONSES_API_STORE=1`, which
 * `previous_response_id` needs), in memory and per process, as vLLM does: another simulator, like
 * another vLLM server, answers 404 for an id it did not make. That is what a router must get
 * right, and what the sidecar's tests check.
 */
import type { ServerResponse } from 'node:http';
import type { Simulator } from '../simulator.ts';
import { isApiError } from './api-error.ts';
import { serveGeneration } from './generation.ts';
import { sendBadRequest, sendJson } from './respond.ts';
import {
  parseResponsesRequest,
  responseNotFoundBody,
  responsesWire,
  type ResponseObject,
} from './responses-wire.ts';
import type { Route } from './route.ts';

/** Stored responses kept per simulator; the oldest go first past this. */
const STORE_LIMIT = 10_000;

interface Stored {
  response: ResponseObject;
  /** The whole conversation through this response: what a follow-up's prompt starts with. */
  conversation: string;
}

class ResponseStore {
  readonly #byId = new Map<string, Stored>();

  get(id: string): Stored | undefined {
    return this.#byId.get(id);
  }

  put(id: string, stored: Stored): void {
    this.#byId.set(id, stored);
    if (this.#byId.size > STORE_LIMIT) {
      this.#byId.delete(this.#byId.keys().next().value as string);
    }
  }
}

const notFound = (res: ServerResponse, id: string) => sendJson(res, 404, responseNotFoundBody(id));

const PREFIX = '/v1/responses/';

export function responsesRoutes(sim: Simulator): Route[] {
  const store = new ResponseStore();
  return [
    {
      kind: 'json',
      path: '/v1/responses',
      inference: true,
      handle: (ex, body) => {
        const request = parseResponsesRequest(body);
        if (isApiError(request)) return sendBadRequest(sim, ex.res, request);
        let conversation = request.inputText;
        if (request.previousResponseId !== null) {
          const previous = store.get(request.previousResponseId);
          if (previous === undefined) {
            sim.countBadRequest();
            return notFound(ex.res, request.previousResponseId);
          }
          conversation = `${previous.conversation}\n${request.inputText}`;
        }
        const wire = responsesWire(request, (response, text) => {
          if (request.store) {
            store.put(response['id'] as string, {
              response,
              conversation: `${conversation}\n${text}`,
            });
          }
        });
        serveGeneration(
          sim,
          ex,
          {
            model: request.model,
            promptText: conversation,
            maxTokens: request.maxOutputTokens,
            maxTokensField: 'max_output_tokens',
            n: 1,
            stop: [],
            stream: request.stream,
            includeUsage: false,
          },
          wire,
        );
      },
    },
    {
      kind: 'read',
      path: PREFIX,
      prefix: true,
      handle: ({ res, path }) => {
        const id = decodeURIComponent(path.slice(PREFIX.length));
        const stored = store.get(id);
        if (stored === undefined) return notFound(res, id);
        sendJson(res, 200, stored.response);
      },
    },
    {
      kind: 'action',
      path: PREFIX,
      prefix: true,
      handle: ({ res, path }) => {
        const match = /^\/v1\/responses\/([^/]+)\/cancel$/.exec(path);
        if (match === null) return notFound(res, path.slice(PREFIX.length));
        const id = decodeURIComponent(match[1] as string);
        if (store.get(id) === undefined) return notFound(res, id);
        // Only a background response can be cancelled; the simulator answers every one at once.
        sendJson(res, 400, {
          error: {
            message: 'Cannot cancel a synchronous response.',
            type: 'invalid_request_error',
            param: null,
            code: 400,
          },
        });
      },
    },
  ];
}
