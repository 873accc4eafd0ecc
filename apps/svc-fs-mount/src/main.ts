#!/usr/bin/env node
/**
 * `svc-fs-mount`: the workspace filesystem from the command line. See
 * {@link MountRootCommand} for usage and {@link CliOutput} for exit codes.
 *
 * Runs `program.ts` from the bundle `npm run build` made of it, with its V8 code cache, so a
 * command starts in a fraction of the time loading its ~950 modules one by one takes
 * (libs/ops/src/bundled-program.ts); without a bundle, `program.ts` itself.
 */
import { runBundled } from '../../../libs/ops/src/bundled-program';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- program.ts is loaded only when there is no bundle to run
runBundled(__dirname, () => require('./program'));
