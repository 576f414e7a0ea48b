import { InvalidArgumentError, Option, type Command } from 'commander';
import {
  SIM_OPTION_SPECS,
  SimOptionError,
  parseSimOptionValue,
  type SimOptions,
  type SimOptionSpec,
} from '../sim/options.ts';

/** The option's own validation (sim/options.ts), as commander's argument parser. */
function parserFor(spec: SimOptionSpec): (value: string) => number | string | boolean {
  return (value) => {
    try {
      return parseSimOptionValue(spec.key, value);
    } catch (err) {
      throw new InvalidArgumentError(err instanceof SimOptionError ? err.message : String(err));
    }
  };
}

/** `switchyard sim`: every simulator option becomes a flag, from the one list in sim/options.ts. */
export function addSimCommand(program: Command): void {
  const command = program
    .command('sim')
    .description(
      'Run an OpenAI-compatible simulated inference backend (for the demo, tests and benchmarks).',
    )
    .addHelpText(
      'after',
      '\nPrints its URL (http://127.0.0.1:<port>) on stdout once listening.\n' +
        'Run-time control: POST /admin/config with a JSON patch of these options; GET /admin/stats.\n' +
        'Example:\n  switchyard sim --port 9101 --name a --slots 8 --error-rate 0.1',
    );
  for (const spec of SIM_OPTION_SPECS) {
    if (spec.type === 'boolean') {
      // A switch, as vLLM's boolean flags: present = true.
      command.addOption(new Option(spec.flag, spec.help));
      continue;
    }
    const option = new Option(`${spec.flag} ${spec.valueName}`, spec.help).argParser(
      parserFor(spec),
    );
    if (spec.choices !== undefined) option.choices(spec.choices);
    if (spec.default !== undefined) option.default(spec.default);
    command.addOption(option);
  }
  command.action(async (flags: Partial<SimOptions>) => {
    const { runSimFromOptions } = await import('../sim/main.ts');
    await runSimFromOptions(flags);
  });
}
