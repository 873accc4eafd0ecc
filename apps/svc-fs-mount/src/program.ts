/**
 * The program of `svc-fs-mount`: the workspace filesystem from the command line. See {@link MountRootCommand} for usage and {@link CliOutput} for exit codes.
 * `main.ts` runs it (bundled by `npm run build`, see libs/ops/src/bundled-program.ts).
 */
import 'reflect-metadata';
import { CommandFactory } from 'nest-commander';
import { MountCliModule } from './cli.module';

// A reader that goes away (`svc-fs-mount cat f | head`) is not an error.
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw e;
});

async function main(): Promise<void> {
  await CommandFactory.run(MountCliModule, {
    logger: false,
    cliName: 'svc-fs-mount',
    errorHandler: (err: Error & { code?: string }) => {
      // commander's own usage errors (unknown option, missing argument) and --help.
      process.exit(err.code === 'commander.helpDisplayed' || err.code === 'commander.version' ? 0 : 2);
    },
    serviceErrorHandler: (err: Error) => {
      process.stderr.write(`svc-fs-mount: ${err.message}\n`);
      process.exitCode = 2;
    },
  });
}

// The command is done and the application closed: end now. What could still hold the process
// is nothing of the command's: the close handshakes of the FS sessions, whose close frames are
// already written (stdout and stderr are synchronous on Linux).
main().then(
  () => process.exit(),
  (e) => {
    process.stderr.write(`svc-fs-mount: ${(e as Error).message}\n`);
    process.exit(2);
  },
);
