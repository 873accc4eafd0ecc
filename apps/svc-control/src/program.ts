/**
 * The program of `svc-control`: one control operation from the command line.
 * See {@link ControlCommand} for usage and exit codes. `main.ts` runs it (bundled by
 * `npm run build`, see libs/ops/src/bundled-program.ts).
 */
import 'reflect-metadata';
import { CommandFactory } from 'nest-commander';
import { CliModule } from './cli.module';

async function main(): Promise<void> {
  await CommandFactory.run(CliModule, {
    logger: false,
    cliName: 'svc-control',
    errorHandler: (err: Error & { exitCode?: number; code?: string }) => {
      // commander's own usage errors (unknown option, missing argument) and --help.
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') process.exit(0);
      process.exit(2);
    },
  });
}

main().catch((e) => {
  process.stderr.write(`svc-control: ${(e as Error).message}\n`);
  process.exit(2);
});
