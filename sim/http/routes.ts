/**
 * Every route of the simulator's HTTP API, one module per API surface.
 */
import type { Simulator } from '../simulator.ts';
import { adminRoutes } from './admin.ts';
import { audioRoutes } from './audio.ts';
import { completionsRoutes } from './completions.ts';
import { embeddingsRoutes } from './embeddings.ts';
import { metricsRoutes } from './load-report.ts';
import { loraRoutes } from './lora.ts';
import { messagesRoutes } from './messages.ts';
import { modelsRoutes } from './models.ts';
import { rerankRoutes } from './rerank.ts';
import { responsesRoutes } from './responses.ts';
import { vllmExtraRoutes } from './vllm-extras.ts';
import type { Route } from './route.ts';

export function simRoutes(sim: Simulator): Route[] {
  return [
    ...completionsRoutes(sim),
    ...responsesRoutes(sim),
    ...messagesRoutes(sim),
    ...audioRoutes(sim),
    ...rerankRoutes(sim),
    ...embeddingsRoutes(sim),
    ...modelsRoutes(sim),
    ...loraRoutes(sim),
    ...metricsRoutes(sim),
    ...vllmExtraRoutes(sim),
    ...adminRoutes(sim),
  ];
}
