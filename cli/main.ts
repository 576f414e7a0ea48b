import { Command } from 'commander';
import { addSidecarCommand } from './sidecar-command.ts';
import { addSimCommand } from './sim-command.ts';
import { addDemoCommand } from './demo-command.ts';
import { addControllerCommand } from './controller-command.ts';
import { addBenchCommand } from './bench-command.ts';
import { addStatusCommand } from './status-command.ts';
import { addRelayCommand } from './relay-command.ts';

const program = new Command();
program
  .name('switchyard')
  .description(
    'Balances OpenAI-compatible LLM traffic across inference endpoints from inside each application pod. ' +
      'Apps call http://127.0.0.1:8080/v1; the sidecar picks an endpoint per request (power of two ' +
      'choices on in-flight × TTFT plus cost, prefix-cache affinity, passive circuit breakers, a retry budget).',
  )
  .showHelpAfterError('(run with --help for usage)')
  .enablePositionalOptions();

addSidecarCommand(program);
addSimCommand(program);
addDemoCommand(program);
addControllerCommand(program);
addRelayCommand(program);
addBenchCommand(program);
addStatusCommand(program);

await program.parseAsync(process.argv);
