/**
 * Token buckets for the audit entries that are written by themselves (refusals and failed
 * requests): a flood of bad tokens must not grow the log, or the store's write load, without
 * bound. One bucket for the whole process and one per source (a session), so one noisy
 * session cannot use up what the others need.
 */

import { KeyedRateLimiter } from '../common/rate-limit';

export { TokenBucket } from '../common/rate-limit';

/** Limits of {@link RefusalLimiter}: per second and burst, globally and per source. */
export interface RefusalLimits {
  globalPerSec: number;
  globalBurst: number;
  sourcePerSec: number;
  sourceBurst: number;
  /** Largest number of sources tracked at once (full buckets are dropped first). */
  maxSources: number;
}

/**
 * Defaults: 20 entries a second over the process (burst 200), 5 a second per session (burst
 * 20). At the global rate a day is 1.7 million entries, so the count retention
 * (`SVC_AUDIT_MAX_ENTRIES`) is what bounds the table; the rate bounds the write load.
 */
export const DEFAULT_REFUSAL_LIMITS: RefusalLimits = { globalPerSec: 20, globalBurst: 200, sourcePerSec: 5, sourceBurst: 20, maxSources: 10_000 };

/** Whether an entry that rides on no mutation may be written now. */
export class RefusalLimiter {
  private readonly limiter: KeyedRateLimiter;

  constructor(limits: RefusalLimits, now: number) {
    this.limiter = new KeyedRateLimiter(
      {
        perKeyPerSec: limits.sourcePerSec,
        perKeyBurst: limits.sourceBurst,
        globalPerSec: limits.globalPerSec,
        globalBurst: limits.globalBurst,
        maxKeys: limits.maxSources,
      },
      now,
    );
  }

  /**
   * @param source who caused it (a session id), or null for no per-source limit
   * @param now ms since the epoch
   * @returns true when the entry may be written
   */
  allow(source: string | null, now: number): boolean {
    return this.limiter.attempt(source, now).allowed;
  }

  /** Sources whose buckets are held now (bounded by `maxSources`). */
  get trackedSources(): number {
    return this.limiter.tracked;
  }
}
