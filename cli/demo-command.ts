import { Option, type Command } from 'commander';
import { parseDurationMs } from './args.ts';

export function addDemoCommand(program: Command): void {
  program
    .command('demo')
    .description(
      'Start four simulated backends (one slow, one flaky, one cold-starting), a sidecar and a mixed ' +
        'workload; show the routing live, then replay the same workload with round-robin and compare.',
    )
    .addOption(
      new Option(
        '--duration <duration>',
        'total run time, split between switchyard and round-robin',
      )
        .default(60_000, '60s')
        .argParser(parseDurationMs),
    )
    .addOption(
      new Option('--rate <rps>', 'requests per second offered').default(6).argParser(Number),
    )
    .addOption(new Option('--seed <n>', 'workload seed').default(1).argParser(Number))
    .addOption(
      new Option(
        '--plain',
        'plain log lines instead of the live view (default when stdout is not a terminal)',
      ),
    )
    .action(async (flags: { duration: number; rate: number; seed: number; plain?: boolean }) => {
      const { runDemo } = await import('../demo/demo.ts');
      const code = await runDemo({
        durationMs: flags.duration,
        ratePerSec: flags.rate,
        seed: flags.seed,
        live: flags.plain !== true && process.stdout.isTTY === true,
      });
      process.exitCode = code;
    });
}
