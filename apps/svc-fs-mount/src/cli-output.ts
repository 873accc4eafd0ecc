/**
 * Output and exit codes of `svc-fs-mount`:
 *  - 0 success;
 *  - 1 an FS error answered by a node: `svc-fs-mount: <path>: <the server's message, or
 *    strerror> (errno N)` on stderr (a rejected hello shows `AuthMissing`/`AuthFailed`);
 *  - 2 usage errors, and failures to reach the control plane or any endpoint of a mount.
 */
import { Injectable } from '@nestjs/common';
import { ConnectionError, ControlError } from '@svc/client';
import { Errno, ProtocolError, strerror } from '@svc/protocol/wire';
import { MountUnavailableError } from '../../../libs/fs/src/router';
import { CliOutput as SharedCliOutput } from '../../../libs/ops/src/cli-output';
import { UsageError } from './mount-options';

/** The output of the command-line programs ({@link SharedCliOutput}), plus {@link CliOutput.report}: a failure as the message and exit code above. */
@Injectable()
export class CliOutput extends SharedCliOutput {
  /**
   * Reports a failure of a command on `path` with the message format and exit code above.
   * @param path the workspace path the command was about (null when none)
   */
  report(e: unknown, path: string | null): void {
    const where = path === null ? '' : `${path}: `;
    // A message that already starts with the path (the router names it) is not prefixed twice.
    if (where && e instanceof Error && e.message.startsWith(where)) e.message = e.message.slice(where.length);
    if (e instanceof UsageError) this.fail(`svc-fs-mount: ${e.message}`, 2);
    else if (e instanceof MountUnavailableError) this.fail(`svc-fs-mount: ${where}${e.message} (errno ${e.errno})`, e.reachable ? 1 : 2);
    else if (e instanceof ProtocolError) {
      const errno = e.toErrno();
      this.fail(`svc-fs-mount: ${where}${e.message || strerror(errno)} (errno ${errno})`, 1);
    } else if (e instanceof ControlError) this.fail(`svc-fs-mount: control plane: ${e.code}: ${e.message}`, 2);
    else if (e instanceof ConnectionError) this.fail(`svc-fs-mount: ${e.message}`, 2);
    else this.fail(`svc-fs-mount: ${where}${(e as Error)?.message ?? String(e)} (errno ${Errno.EIO})`, 2);
  }
}
