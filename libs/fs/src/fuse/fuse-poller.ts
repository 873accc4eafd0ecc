/**
 * Answering the kernel's FUSE requests: each operation's promise settles once, with its result,
 * with EINTR as soon as the kernel interrupts the request (its caller got a signal), or with
 * ETIMEDOUT from one watchdog once it has waited `opTimeoutMs`; a result that comes after that
 * is handed to the operation's `late` hook (an open's node handle is closed there). After each
 * answer the event loop keeps polling for `pollMs` so the next request of a busy caller is
 * picked up without the wake-up of an idle CPU.
 */
import { performance } from 'node:perf_hooks';
import { Errno } from '@svc/protocol/wire';
import { FuseError } from '@svc/fuse3';
import { toFuseError } from './fuse-stat';

/** One request being answered. */
interface Pending {
  /** ms since the epoch (Infinity: no deadline) */
  at: number;
  fail: (e: FuseError) => void;
}

/** The answering, interruption, watchdog and poll of one FUSE mount's operations. */
export class FusePoller {
  private pollUntil = 0;
  private polling = false;
  /** Requests not answered yet, by request id, oldest first. */
  private readonly unanswered = new Map<number, Pending>();
  private watchdog: NodeJS.Timeout | null = null;

  /**
   * @param pollMs how long to keep polling after an answer, ms (0: never)
   * @param opTimeoutMs a request unanswered this long is answered ETIMEDOUT, ms
   */
  constructor(
    private readonly pollMs: number,
    private readonly opTimeoutMs: number,
  ) {}

  /** Requests answered, by operation name (`lookup`, `open`, ...). */
  readonly answered = new Map<string, number>();

  /**
   * Runs operation `op` (`fn`) for request `id`: resolves with its result, rejects with its failure as
   * a {@link FuseError}, with EINTR on {@link interrupt}, or ETIMEDOUT after `opTimeoutMs` unless
   * `untimed` (a lock that waits its turn: it ends by a grant or a signal). A result that arrives
   * after an EINTR or ETIMEDOUT answer is given to `late`.
   */
  run<T>(op: string, id: number, fn: () => Promise<T>, late?: (value: T) => void, untimed = false): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let done = false;
      const finish = () => {
        done = true;
        this.answered.set(op, (this.answered.get(op) ?? 0) + 1);
        this.unanswered.delete(id);
        this.poll();
      };
      this.unanswered.set(id, {
        at: untimed ? Infinity : Date.now(),
        fail: (e) => {
          if (done) return;
          finish();
          reject(e);
        },
      });
      this.startWatchdog();
      fn().then(
        (v) => {
          if (done) return late?.(v);
          finish();
          resolve(v);
        },
        (e: unknown) => {
          if (done) return;
          finish();
          reject(toFuseError(e));
        },
      );
    });
  }

  /** The kernel interrupted request `id`: it is answered EINTR now (if still unanswered). */
  interrupt(id: number): void {
    this.unanswered.get(id)?.fail(new FuseError('EINTR'));
  }

  /** Requests not answered yet. */
  get pending(): number {
    return this.unanswered.size;
  }

  private startWatchdog(): void {
    if (this.watchdog) return;
    this.watchdog = setInterval(() => this.expire(), Math.min(1000, this.opTimeoutMs));
    this.watchdog.unref();
  }

  /** Answers ETIMEDOUT to the requests older than `opTimeoutMs`; stops when none is left. */
  private expire(): void {
    const limit = Date.now() - this.opTimeoutMs;
    for (const op of [...this.unanswered.values()]) {
      if (op.at === Infinity) continue;
      if (op.at > limit) break;
      op.fail(new FuseError(Errno.ETIMEDOUT));
    }
    if (this.unanswered.size === 0 && this.watchdog) {
      clearInterval(this.watchdog);
      this.watchdog = null;
    }
  }

  /**
   * Keeps the event loop polling for `pollMs` from now, while no request waits for an answer:
   * a request in progress waits for a node's reply, which wakes the loop by itself, and a
   * spin then only takes the CPU a node or the caller on this machine needs.
   */
  private poll(): void {
    if (this.pollMs <= 0) return;
    this.pollUntil = performance.now() + this.pollMs;
    if (this.polling) return;
    this.polling = true;
    const spin = () => {
      if (performance.now() < this.pollUntil && this.unanswered.size === 0) setImmediate(spin);
      else this.polling = false;
    };
    setImmediate(spin);
  }
}
