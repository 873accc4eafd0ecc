/**
 * `svc-control acheron ls|cat|write|stat PATH [DATA|-]`: the runtime
 * namespace (docs/namespace.md) for people and scripts, over one runtime session.
 *
 * - `ls PATH`: one entry per line, directories with a trailing `/`
 * - `cat PATH`: the bytes of a file (or a directory's JSON listing) on stdout
 * - `write PATH DATA|-`: replaces the file's content with DATA, or standard input with `-`
 * - `stat PATH`: `name`, `kind`, `size`, `mode` (octal), `writable`, `mtime` lines
 *
 * Exit codes: 0; 1 with `svc-control: PATH: <code>: <message>` when the server refuses;
 * 2 for usage, connection or authentication failures.
 */
import { readFileSync } from 'node:fs';
import { Command } from 'nest-commander';
import { ControlClient, ControlError } from '@svc/client';
import { SessionCommand } from './session-command';
import { UsageError } from './payload';

const ROOT_FID = 0;

/** Splits `/a/b/` into `['a','b']`. */
function segments(path: string): string[] {
  if (!path.startsWith('/')) throw new UsageError(`PATH must be absolute (start with "/"): ${path}`);
  return path.split('/').filter((s) => s.length > 0);
}

/** A fid of the runtime session, walked to a namespace path (and maybe opened). */
class RuntimePath {
  private static nextFid = 1;

  private constructor(
    private readonly c: ControlClient,
    readonly fid: number,
    private readonly iounit: number,
    /** The walk reached a directory (`qid.type` `dir`). */
    readonly isDir: boolean,
  ) {}

  /**
   * Walks a new fid to `path` and opens it with `mode` (not at all for null).
   * @throws ControlError from the server (`enoent`, `eperm`, ...)
   */
  static async open(c: ControlClient, path: string, mode: 'r' | 'w' | null): Promise<RuntimePath> {
    const fid = RuntimePath.nextFid++;
    const walked = await c.acheron<{ qid?: { type?: string } }>('acheron.t_walk', { fid: ROOT_FID, newfid: fid, path: segments(path) });
    const iounit = mode === null ? 0 : (await c.acheron<{ iounit: number }>('acheron.t_open', { fid, mode })).iounit;
    return new RuntimePath(c, fid, iounit, walked.qid?.type === 'dir');
  }

  /** Streams the whole content to `sink`. */
  async readAll(sink: (chunk: Buffer) => void): Promise<void> {
    for (let offset = 0; ;) {
      const r = await this.c.acheron<{ data_b64: string; n: number; eof: boolean }>('acheron.t_read', { fid: this.fid, offset, count: this.iounit });
      if (r.n > 0) sink(Buffer.from(r.data_b64, 'base64'));
      offset += r.n;
      if (r.eof || r.n === 0) return;
    }
  }

  /** Writes `data` from offset 0 in iounit-sized pieces. */
  async writeAll(data: Buffer): Promise<void> {
    for (let offset = 0; offset < data.length || offset === 0;) {
      const piece = data.subarray(offset, offset + Math.max(1, this.iounit));
      const { n } = await this.c.acheron<{ n: number }>('acheron.t_write', { fid: this.fid, offset, data_b64: piece.toString('base64') });
      offset += n;
      if (n === 0 || data.length === 0) return;
    }
  }

  stat(): Promise<{ name: string; kind: string; size: number; mode: number; writable: boolean; mtime_ms: number }> {
    return this.c.acheron('acheron.t_stat', { fid: this.fid });
  }

  /** Releases the fid; an error closing what it opened (e.g. an invalid terminal request) is thrown. */
  async clunk(): Promise<void> {
    await this.c.acheron('acheron.t_clunk', { fid: this.fid });
  }
}

@Command({
  name: 'acheron',
  arguments: '<action> <path> [data]',
  description: 'the runtime namespace: ls PATH | cat PATH | write PATH DATA|- | stat PATH',
  argsDescription: { action: 'ls, cat, write or stat', path: 'absolute namespace path, e.g. /nodes', data: 'for write: the data, or - for standard input' },
})
export class AcheronCommand extends SessionCommand {
  async run(params: string[], options?: Record<string, unknown>): Promise<void> {
    const [action, path, data] = params;
    await this.withSession(this.resolved(options), async (open) => {
      if (!['ls', 'cat', 'write', 'stat'].includes(action)) throw new UsageError(`unknown action "${action}": use ls, cat, write or stat`);
      segments(path);
      if (action === 'write' && data === undefined) throw new UsageError('write needs DATA, or - to read standard input');
      const client = await open();
      await client.attach(ROOT_FID);
      try {
        await this.act(client, action, path, data);
      } catch (e) {
        if (e instanceof ControlError) {
          // The namespace often names the path itself: say it once.
          const message = e.message.startsWith(`${path}: `) ? e.message.slice(path.length + 2) : e.message;
          this.out.fail(`svc-control: ${path}: ${e.code}: ${message}`, 1);
          return;
        }
        throw e;
      }
    });
  }

  private async act(client: ControlClient, action: string, path: string, data: string | undefined): Promise<void> {
    switch (action) {
      case 'ls': {
        const p = await RuntimePath.open(client, path, 'r');
        if (!p.isDir) {
          // a file: ls prints its name, like ls(1)
          await p.clunk();
          this.out.line(path.split('/').filter(Boolean).pop() ?? '/');
          return;
        }
        const chunks: Buffer[] = [];
        await p.readAll((c) => chunks.push(c));
        await p.clunk();
        const { entries } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { entries: Array<{ name: string; kind: string }> };
        for (const e of entries) this.out.line(e.kind === 'dir' ? `${e.name}/` : e.name);
        return;
      }
      case 'cat': {
        const p = await RuntimePath.open(client, path, 'r');
        if (p.isDir) {
          // like cat(1): a directory has no content to print (`ls` lists it)
          await p.clunk();
          throw new ControlError('eisdir', 'is a directory (use ls)');
        }
        await p.readAll((c) => process.stdout.write(c));
        await p.clunk();
        return;
      }
      case 'write': {
        const bytes = data === '-' ? readFileSync(0) : Buffer.from(data!, 'utf8');
        const p = await RuntimePath.open(client, path, 'w');
        await p.writeAll(bytes);
        await p.clunk();
        return;
      }
      case 'stat': {
        const p = await RuntimePath.open(client, path, null);
        const s = await p.stat();
        await p.clunk();
        this.out.line(`name: ${s.name}`);
        this.out.line(`kind: ${s.kind}`);
        this.out.line(`size: ${s.size}`);
        this.out.line(`mode: ${(s.mode & 0o7777).toString(8).padStart(4, '0')}`);
        this.out.line(`writable: ${s.writable}`);
        this.out.line(`mtime: ${new Date(s.mtime_ms).toISOString()}`);
        return;
      }
    }
  }
}
