/**
 * The simulator's own endpoints: `GET /healthz`, `GET /admin/stats`, `GET|POST /admin/config`,
 * `POST /admin/reset`.
 */
import { checkSimOptionsPatch, shownApiKey } from '../options.ts';
import type { SimOptions } from '../options.ts';
import type { Simulator } from '../simulator.ts';
import { invalidOption } from './api-error.ts';
import { sendError, sendJson } from './respond.ts';
import type { Route } from './route.ts';

/**
 * Options as JSON: unset optional options appear as null rather than disappearing. The API key
 * reads `[set]`, as in the log: these endpoints are open (like vLLM's, only the API paths ask for
 * the key), and must not hand out the key that guards the rest.
 */
function optionsJson(o: SimOptions): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(o).map(([k, v]) => [k, k === 'apiKey' ? shownApiKey(o.apiKey) : (v ?? null)]),
  );
}

export function adminRoutes(sim: Simulator): Route[] {
  return [
    {
      kind: 'read',
      path: '/healthz',
      handle: ({ res }) => sendJson(res, 200, { status: 'ok', name: sim.name() }),
    },
    {
      kind: 'read',
      path: '/admin/stats',
      handle: ({ res }) => sendJson(res, 200, sim.stats()),
    },
    {
      kind: 'read',
      path: '/admin/config',
      handle: ({ res }) => sendJson(res, 200, optionsJson(sim.effectiveOptions())),
    },
    {
      kind: 'json',
      path: '/admin/config',
      inference: false,
      handle: ({ res }, body) => {
        const checked = checkSimOptionsPatch(body, { runtime: true });
        if (!checked.ok) return sendError(res, invalidOption(checked.field, checked.message));
        sendJson(res, 200, optionsJson(sim.configure(checked.patch)));
      },
    },
    {
      kind: 'action',
      path: '/admin/reset',
      handle: ({ res }) => {
        sim.reset();
        sendJson(res, 200, sim.stats());
      },
    },
  ];
}
