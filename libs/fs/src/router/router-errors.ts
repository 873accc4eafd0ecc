/**
 * Router failures: an endpoint that cannot serve a request, and a mount none
 * of whose candidates can.
 */
import { ConnectionError } from '@svc/client';
import { Errno, FsError, strerror } from '@svc/protocol/wire';

/**
 * True when `e` means the endpoint failed (connection refused or lost, timeout), as opposed to
 * an FS answer (`acheron.err_fs`) from a working endpoint.
 */
export function isEndpointFailure(e: unknown): e is ConnectionError {
  return e instanceof ConnectionError;
}

/** One failed candidate of a mount, for {@link MountUnavailableError}. */
export interface CandidateFailure {
  /** `node-name (ws-url#export)`. */
  candidate: string;
  /** Why it failed (the server's message for an FS answer such as `AuthFailed: ...`). */
  message: string;
  /** errno when the node answered with an FS error (e.g. 13 for a rejected hello). */
  errno: number | null;
}

/**
 * No candidate of a mount path could be used. `errno` is that of the last FS answer received
 * (13 for `AuthMissing`/`AuthFailed`, so an auth failure stays visible), else EIO; the message
 * names the mount path and every candidate's cause, the last one last.
 */
export class MountUnavailableError extends FsError {
  /** True when at least one candidate answered (e.g. rejected the hello); false when none could be reached. */
  readonly reachable: boolean;

  constructor(
    readonly mountPath: string,
    readonly failures: CandidateFailure[],
  ) {
    const answered = failures.filter((f) => f.errno !== null);
    const last = answered.length > 0 ? answered[answered.length - 1] : null;
    const causes = failures.map((f) => `${f.candidate}: ${f.message}`).join('; ');
    const n = failures.length;
    super(
      last?.errno ?? Errno.EIO,
      n === 0 ? `mount ${mountPath} has no candidate endpoint` : `mount ${mountPath} is unavailable (${n} candidate${n === 1 ? '' : 's'} tried): ${causes}`,
    );
    this.name = 'MountUnavailableError';
    this.reachable = answered.length > 0;
  }
}

/** The message of an error for a failure record: an FsError's message, or strerror. */
export function messageOf(e: unknown): string {
  if (e instanceof FsError) return e.message || strerror(e.errno ?? Errno.EIO);
  return e instanceof Error ? e.message : String(e);
}
