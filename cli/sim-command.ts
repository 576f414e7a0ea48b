import { InvalidArgumentError, Option, type Command } from 'commander';
import { SIM_OPTION_SPECS, type SimOptions, type SimOptionSpec } from '../sim/options.ts';

function parserFor(spec: SimOptionSpec): (value: string) => number | string {
  if (spec.type === 'string') return (value) => value;
  return (value) => {
    const n = Number(value);
    const whole = spec.type === 'integer' ? Number.isInteger(n) : Number.isFinite(n);
    const aboveMin =
      spec.min === undefined || (spec.minExclusive === true ? n > spec.min : n >= spec.min);
    const belowMax = spec.max === undefined || n <= spec.max;
    if (!whole || !aboveMin || !belowMax) {
      const range = [
        spec.min !== undefined ? `${spec.minExclusive === true ? '>' : '>='} ${spec.min}` : '',
        spec.max !== undefined ? `<= ${spec.max}` : '',
      ]
        .filter(Boolean)
        .join(' and ');
      throw new InvalidArgumentError(
        `expected ${spec.type === 'integer' ? 'a whole number' : 'a number'}${range ? ' ' + range : ''}`,
      );
    }
    return n;
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
    const option = new Option(`${spec.flag} ${spec.valueName}`, spec.help).argParser(
      parserFor(spec),
    );
    if (spec.default !== undefined) option.default(spec.default);
    command.addOption(option);
  }
  command.action(async (flags: Partial<SimOptions>) => {
    const { runSimFromOptions } = await import('../sim/main.ts');
    await runSimFromOptions(flags);
  });
}
