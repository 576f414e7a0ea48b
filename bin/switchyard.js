#!/usr/bin/env node
// The one executable. Node >= 22.18 runs the TypeScript sources directly (type stripping),
// so there is no build step between a checkout and a running sidecar.
import '../cli/main.ts';
