// Preloaded into the sidecar by `npm run bench:hostile-scrape` (NODE_OPTIONS=--import): samples
// its event-loop delay and writes the distribution (ms) to $SWITCHYARD_LOOP_LAG_FILE twice a
// second, so the bench reads the sidecar's own lag, not its own. Reset by SIGUSR2 (after warm-up).
import { renameSync, writeFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const file = process.env.SWITCHYARD_LOOP_LAG_FILE;
if (file) {
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  process.on('SIGUSR2', () => h.reset());
  // Written aside and renamed: the bench never reads half a file.
  const write = () => {
    writeFileSync(
      `${file}.tmp`,
      JSON.stringify({
        p50Ms: h.percentile(50) / 1e6,
        p99Ms: h.percentile(99) / 1e6,
        maxMs: h.max / 1e6,
        samples: h.count,
      }),
    );
    renameSync(`${file}.tmp`, file);
  };
  setInterval(write, 500).unref();
}
