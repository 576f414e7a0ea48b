/**
 * vLLM's runtime LoRA endpoints, served when `allowRuntimeLoraUpdating` is on (vLLM registers them
 * only with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`; without it they are unknown paths, 404):
 *
 * - `POST /v1/load_lora_adapter {"lora_name", "lora_path"}`: the adapter is served from now on
 *   (listed in `/v1/models` with the base model as `parent`); it becomes resident on its first
 *   request, which pays `loraLoadMs`. 200 with a plain-text success line; 400 when a field is
 *   missing or the name is served already.
 * - `POST /v1/unload_lora_adapter {"lora_name"}`: no longer served (requests for it get 404); 404
 *   when no such adapter is served.
 */
import type { Simulator } from '../simulator.ts';
import { badRequest } from './api-error.ts';
import type { ApiError } from './api-error.ts';
import { sendError, sendJson } from './respond.ts';
import type { Exchange, Route } from './route.ts';

function field(body: unknown, name: string): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const value = (body as Record<string, unknown>)[name];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function notFound(name: string): ApiError {
  return {
    status: 404,
    message: `The lora adapter '${name}' cannot be found.`,
    type: 'NotFoundError',
  };
}

function sendText(ex: Exchange, text: string): void {
  ex.res.writeHead(200, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': String(Buffer.byteLength(text)),
  });
  ex.res.end(text);
}

/** As if the route did not exist: FastAPI's 404 for an unknown path. */
function disabled(ex: Exchange): void {
  sendJson(ex.res, 404, { detail: 'Not Found' });
}

export function loraRoutes(sim: Simulator): Route[] {
  return [
    {
      kind: 'json',
      path: '/v1/load_lora_adapter',
      inference: false,
      handle: (ex, body) => {
        if (!sim.options().allowRuntimeLoraUpdating) return disabled(ex);
        const name = field(body, 'lora_name');
        const path = field(body, 'lora_path');
        if (name === undefined || path === undefined) {
          return sendError(
            ex.res,
            badRequest("Both 'lora_name' and 'lora_path' must be provided.", 'lora_name'),
          );
        }
        if (!sim.addAdapter(name, path)) {
          return sendError(
            ex.res,
            badRequest(`The lora adapter '${name}' has already been loaded.`, 'lora_name'),
          );
        }
        sendText(ex, `Success: LoRA adapter '${name}' added successfully.`);
      },
    },
    {
      kind: 'json',
      path: '/v1/unload_lora_adapter',
      inference: false,
      handle: (ex, body) => {
        if (!sim.options().allowRuntimeLoraUpdating) return disabled(ex);
        const name = field(body, 'lora_name');
        if (name === undefined) {
          return sendError(ex.res, badRequest("'lora_name' must be provided.", 'lora_name'));
        }
        if (!sim.removeAdapter(name)) return sendError(ex.res, notFound(name));
        sendText(ex, `Success: LoRA adapter '${name}' removed successfully.`);
      },
    },
  ];
}
