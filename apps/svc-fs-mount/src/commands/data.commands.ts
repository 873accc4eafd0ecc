/**
 * Data commands of `svc-fs-mount`: `cat` streams a file to stdout with
 * several reads in flight and bounded memory; `write` replaces a file's content with an
 * argument or with stdin (`-`), streamed.
 */
import { createReadStream, fstatSync } from 'node:fs';
import { Readable } from 'node:stream';
import { SubCommand } from 'nest-commander';
import { readFileTo, writeFileFrom } from '../../../../libs/fs/src/router';
import { workspacePathArg } from '../mount-options';
import { MountCommand } from './base.command';

/**
 * Standard input as a stream: a redirected file is read in 1 MiB pieces (the default 64 KiB
 * costs one thread-pool round trip each); a pipe or terminal as usual.
 */
function stdinStream(): Readable {
  try {
    if (fstatSync(0).isFile()) return createReadStream('', { fd: 0, highWaterMark: 1024 * 1024, autoClose: false });
  } catch {
    // fall through
  }
  return process.stdin;
}

/** Reads in flight for `cat` (x 1 MiB = the memory bound). */
export const CAT_READS_IN_FLIGHT = 8;
/** Writes in flight for `write`. */
export const WRITES_IN_FLIGHT = 8;

@SubCommand({ name: 'cat', arguments: '<path>', description: 'write a file to standard output, byte-exact' })
export class CatCommand extends MountCommand {
  async run([arg]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    await this.session.run(this.command, path, async (router) => {
      await readFileTo(router, path, process.stdout, { inFlight: CAT_READS_IN_FLIGHT });
    });
  }
}

@SubCommand({ name: 'write', arguments: '<path> <content>', description: 'replace a file with CONTENT, or with standard input when CONTENT is -' })
export class WriteCommand extends MountCommand {
  async run([arg, content]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    await this.session.run(this.command, path, async (router, o) => {
      const input = content === '-' ? stdinStream() : Buffer.from(content ?? '', 'utf8');
      const bytes = await writeFileFrom(router, path, input, { inFlight: WRITES_IN_FLIGHT });
      if (o.json) this.out.json({ ok: true, path, bytes });
    });
  }
}
