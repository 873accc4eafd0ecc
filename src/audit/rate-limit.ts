/**
 * Token buckets for the audit entries that are written by themselves (refusals and failed
 * requests): a flood of bad tokens must not grow the log, or the store's write load, without
 * bound. One bucket for the whole process and one per source (a session), so one noisy
 * session cannot use up what the others need.
 */

/** A token bucket: `ratePerSec` tokens a second, holding at most `burst`. Times in ms. */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly ratePerSec: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  /** Takes one token at time `now` (ms); false when the bucket is empty. */
  take(now: number): boolean {
    this.refill(now);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** True when the bucket is full at `now` (its source has been quiet: it can be forgotten). */
  isFull(now: number): boolean {
    this.refill(now);
    return this.tokens >= this.burst;
  }

  private refill(now: number): void {
    const elapsed = Math.max(0, now - this.last);
    this.last = now;
    this.tokens = Math.min(this.burst, this.tokens + (elapsed / 1000) * this.ratePerSec);
  }
}

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
  private readonly global: TokenBucket;
  private readonly sources = new Map<string, TokenBucket>();

  constructor(
    private readonly limits: RefusalLimits,
    now: number,
  ) {
    this.global = new TokenBucket(limits.globalPerSec, limits.globalBurst, now);
  }

  /**
   * @param source who caused it (a session id), or null for no per-source limit
   * @param now ms since the epoch
   * @returns true when the entry may be written
   */
  allow(source: string | null, now: number): boolean {
    if (source !== null) {
      let bucket = this.sources.get(source);
      if (!bucket) {
        if (this.sources.size >= this.limits.maxSources) this.forgetQuiet(now);
        bucket = new TokenBucket(this.limits.sourcePerSec, this.limits.sourceBurst, now);
        this.sources.set(source, bucket);
      }
      if (!bucket.take(now)) return false;
    }
    return this.global.take(now);
  }

  /** Drops the buckets of quiet sources (and, if all are busy, the oldest half). */
  private forgetQuiet(now: number): void {
    for (const [k, b] of this.sources) if (b.isFull(now)) this.sources.delete(k);
    if (this.sources.size < this.limits.maxSources) return;
    let n = Math.floor(this.sources.size / 2);
    for (const k of this.sources.keys()) {
      if (n-- <= 0) break;
      this.sources.delete(k);
    }
  }
}
