/**
 * Answering fuse-native operations: each callback answers once; one watchdog
 * answers ETIMEDOUT to operations left unanswered for `opTimeoutMs`; after each answer the
 * event loop keeps polling for `pollMs` so the next operation of a busy caller is picked up
 * without the wake-up of an idle CPU.
 */
import { performance } from 'node:perf_hooks';
import { Errno } from '@svc/protocol/wire';
import { fuseErrno } from './fuse-stat';

/** A fuse-native callback: 0 and a value, or a negative errno. */
export type Cb<T = void> = (err: number, value?: T, extra?: unknown) => void;

/** The guard, watchdog and poll of one FUSE mount's operations. */
export class FusePoller {
  private pollUntil = 0;
  private polling = false;
  /** Operations not answered yet, by sequence number: start time (ms since the epoch) and the ETIMEDOUT answer. */
  private readonly unanswered = new Map<number, { at: number; timeout: () => void }>();
  private nextOp = 1;
  private watchdog: NodeJS.Timeout | null = null;

  /**
   * @param pollMs how long to keep polling after an answer, ms (0: never)
   * @param opTimeoutMs an operation unanswered this long is answered ETIMEDOUT, ms
   */
  constructor(
    private readonly pollMs: number,
    private readonly opTimeoutMs: number,
  ) {}

  /**
   * Wraps the callback of one operation: it answers once; the watchdog answers `onTimeout`
   * after `opTimeoutMs` (a late answer is then dropped); each answer starts a short poll.
   * (One watchdog for all operations instead of fuse-native's timer per operation.)
   */
  guard<A extends unknown[]>(cb: (...args: A) => void, onTimeout: A): (...args: A) => void {
    const id = this.nextOp++;
    this.unanswered.set(id, { at: Date.now(), timeout: () => cb(...onTimeout) });
    if (!this.watchdog) {
      this.watchdog = setInterval(() => this.expire(), Math.min(1000, this.opTimeoutMs));
      this.watchdog.unref();
    }
    return (...args: A) => {
      if (!this.unanswered.delete(id)) return;
      cb(...args);
      this.poll();
    };
  }

  /** Runs an async operation and answers fuse-native's callback (0/value, or -errno; -ETIMEDOUT from the watchdog). */
  run<T>(cb: Cb<T>, fn: () => Promise<T>, fallback?: T): void {
    const answer = this.guard(cb, [-Errno.ETIMEDOUT]);
    fn().then(
      (v) => answer(0, v),
      (e) => answer(fuseErrno(e), fallback),
    );
  }

  /**
   * Like {@link run} for read and write, whose fuse-native callback takes the byte count as its
   * first argument (a negative errno on failure).
   */
  runCount(cb: (result: number) => void, fn: () => Promise<number>): void {
    const answer = this.guard(cb, [-Errno.ETIMEDOUT]);
    fn().then(
      (n) => answer(n),
      (e) => answer(fuseErrno(e)),
    );
  }

  /** Answers ETIMEDOUT to the operations older than `opTimeoutMs`; stops when none is left. */
  private expire(): void {
    const limit = Date.now() - this.opTimeoutMs;
    for (const [id, op] of this.unanswered) {
      if (op.at > limit) break;
      this.unanswered.delete(id);
      op.timeout();
    }
    if (this.unanswered.size === 0 && this.watchdog) {
      clearInterval(this.watchdog);
      this.watchdog = null;
    }
  }

  /**
   * Keeps the event loop polling for `pollMs` from now, while no operation waits for an answer:
   * an operation in progress waits for a node's reply, which wakes the loop by itself, and a
   * spin then only takes the CPU a node or the caller on this machine needs (bench:fuse-latency
   * measured reading 10,000 small files 1.6x slower with the spin on 2 busy cores).
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
