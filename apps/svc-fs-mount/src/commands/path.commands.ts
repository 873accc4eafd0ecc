/**
 * Metadata and namespace commands of `svc-fs-mount`: `getattr`, `readdir`,
 * `mkdir`, `rmdir`, `unlink`, `rename`, `truncate`. Each formats what the router returns.
 */
import { SubCommand } from 'nest-commander';
import { formatAttr, formatEntries } from '../format';
import { sizeArg, UsageError, workspacePathArg } from '../mount-options';
import { MountCommand } from './base.command';

@SubCommand({ name: 'getattr', arguments: '<path>', description: 'print the attributes of a workspace path' })
export class GetattrCommand extends MountCommand {
  async run([arg]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    await this.session.run(this.command, path, async (router, o) => {
      const attr = await router.getattr(path);
      if (o.json) this.out.json({ path, attr });
      else this.out.line(formatAttr(path, attr));
    });
  }
}

@SubCommand({
  name: 'readdir',
  arguments: '<path> [cookie] [max]',
  description: 'list a directory: every entry, or one page from COOKIE (0 = first) of at most MAX entries',
})
export class ReaddirCommand extends MountCommand {
  async run([arg, cookieArg, maxArg]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    let cookie = 0;
    let max: number | undefined;
    try {
      if (cookieArg !== undefined) cookie = sizeArg(cookieArg, 'COOKIE');
      if (maxArg !== undefined) {
        max = sizeArg(maxArg, 'MAX');
        if (max < 1) throw new UsageError('MAX must be at least 1');
      }
    } catch (e) {
      this.out.report(e, path);
      return;
    }
    await this.session.run(this.command, path, async (router, o) => {
      if (cookieArg === undefined && maxArg === undefined) {
        const entries = await router.readdirAll(path);
        if (o.json) this.out.json({ path, entries, next: null, eof: true });
        else for (const l of formatEntries(entries)) this.out.line(l);
        return;
      }
      const page = await router.readdir(path, cookie, max);
      if (o.json) this.out.json({ path, ...page });
      else {
        for (const l of formatEntries(page.entries)) this.out.line(l);
        if (!page.eof) process.stderr.write(`(more: readdir ${path} ${page.next}${max ? ` ${max}` : ''})\n`);
      }
    });
  }
}

/** A command that changes one path and prints nothing (or `{ok, ...}` with --json). */
abstract class MutationCommand extends MountCommand {
  protected done(json: boolean | undefined, result: Record<string, unknown>): void {
    if (json) this.out.json({ ok: true, ...result });
  }
}

@SubCommand({ name: 'mkdir', arguments: '<path>', description: 'create a directory (mode 0755)' })
export class MkdirCommand extends MutationCommand {
  async run([arg]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    await this.session.run(this.command, path, async (router, o) => this.done(o.json, { path, attr: (await router.mkdir(path)).attr }));
  }
}

@SubCommand({ name: 'rmdir', arguments: '<path>', description: 'remove an empty directory' })
export class RmdirCommand extends MutationCommand {
  async run([arg]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    await this.session.run(this.command, path, async (router, o) => {
      await router.rmdir(path);
      this.done(o.json, { path });
    });
  }
}

@SubCommand({ name: 'unlink', arguments: '<path>', description: 'remove a file or symlink' })
export class UnlinkCommand extends MutationCommand {
  async run([arg]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    await this.session.run(this.command, path, async (router, o) => {
      await router.unlink(path);
      this.done(o.json, { path });
    });
  }
}

@SubCommand({ name: 'rename', arguments: '<old> <new>', description: 'rename within one mount (across mounts: EXDEV)' })
export class RenameCommand extends MutationCommand {
  async run([oldArg, newArg]: string[]): Promise<void> {
    const from = workspacePathArg(oldArg, 'OLD');
    const to = workspacePathArg(newArg, 'NEW');
    await this.session.run(this.command, from, async (router, o) => {
      await router.rename(from, to);
      this.done(o.json, { from, to });
    });
  }
}

@SubCommand({ name: 'truncate', arguments: '<path> <size>', description: 'set the size of a file in bytes (K, M, G suffixes allowed)' })
export class TruncateCommand extends MutationCommand {
  async run([arg, sizeText]: string[]): Promise<void> {
    const path = workspacePathArg(arg);
    let size: number;
    try {
      size = sizeArg(sizeText, 'SIZE');
    } catch (e) {
      this.out.report(e, path);
      return;
    }
    await this.session.run(this.command, path, async (router, o) => this.done(o.json, { path, attr: await router.truncate(path, size) }));
  }
}
