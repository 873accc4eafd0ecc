/**
 * The program of `svc-fs-node` (see main.ts): reads the configuration from the command line and
 * the environment, prints the usage for `--help`, ends with exit code 2 on a configuration
 * error, and otherwise loads and runs the server (serve.ts). Only the configuration module is
 * loaded before that, so `--help` and configuration errors answer without loading Nest, the
 * validation libraries or the FS server.
 */
import { useDataPathGc } from '../../../libs/ops/src/data-path-gc';
import { ConfigError, FS_NODE_USAGE, FsNodeConfig, loadFsNodeConfig } from './config';
import { die } from './die';

async function main(): Promise<void> {
  let config: FsNodeConfig;
  try {
    config = loadFsNodeConfig(process.argv.slice(2), process.env);
  } catch (e) {
    if (e instanceof ConfigError) die(e.message);
    throw e;
  }
  if (config.help) {
    process.stdout.write(FS_NODE_USAGE);
    return;
  }
  const { serve } = await import('./serve');
  await serve(config);
  // Serving: the data path's GC setting, now that the modules are loaded (see the module).
  useDataPathGc();
}

main().catch((e) => die(`fatal: ${(e as Error).stack ?? String(e)}`, 1));
