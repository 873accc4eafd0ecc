/**
 * Runs one `svc-fs-mount` command against a router built from the global options: opens the
 * router (reading the topology), runs the command, reports failures, closes everything.
 */
import { Injectable } from '@nestjs/common';
import { Command } from 'commander';
import { WorkspaceRouter, WorkspaceRouterFactory } from '../../../libs/fs/src/router';
import { CliOutput } from './cli-output';
import { GlobalOptions, routerConfigOf } from './mount-options';

@Injectable()
export class MountSession {
  constructor(
    private readonly factory: WorkspaceRouterFactory,
    private readonly out: CliOutput,
  ) {}

  /** The global options: those of the root command, wherever they were written. */
  globalOptions(command: Command): GlobalOptions {
    let root = command;
    while (root.parent) root = root.parent;
    return root.opts<GlobalOptions>();
  }

  /**
   * Opens the router, runs `fn`, reports any failure (exit code per {@link CliOutput.report})
   * and closes the router.
   * @param path the workspace path named in error messages (null when none)
   */
  async run(command: Command, path: string | null, fn: (router: WorkspaceRouter, options: GlobalOptions) => Promise<void>): Promise<void> {
    let router: WorkspaceRouter | null = null;
    const options = this.globalOptions(command);
    try {
      router = await this.factory.open(routerConfigOf(options));
      await fn(router, options);
    } catch (e) {
      this.out.report(e, path);
    } finally {
      router?.close();
    }
  }
}
