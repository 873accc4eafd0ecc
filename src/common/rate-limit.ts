/**
 * Token buckets, alone and per key (one bucket per key plus one for the whole process), for
 * the limits svc puts on what a client can make it do: audit entries that ride on no mutation
 * (src/audit/rate-limit.ts) and dashboard sign-in attempts (src/dashboard/sign-in-limiter.ts).
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

  /** Ms from `now` until one token is there again (0 when one is). */
  waitMs(now: number): number {
    this.refill(now);
    return this.tokens >= 1 ? 0 : Math.ceil(((1 - this.tokens) * 1000) / this.ratePerSec);
  }

  private refill(now: number): void {
    const elapsed = Math.max(0, now - this.last);
    this.last = now;
    this.tokens = Math.min(this.burst, this.tokens + (elapsed / 1000) * this.ratePerSec);
  }
}

/** Limits of a {@link KeyedRateLimiter}: tokens a second and burst, per key and for the process. */
export interface KeyedLimits {
  perKeyPerSec: number;
  perKeyBurst: number;
  globalPerSec: number;
  globalBurst: number;
  /** Largest number of keys tracked at once (quiet keys are forgotten first, then the oldest half). */
  maxKeys: number;
}

/** One bucket per key and one over all of them; an attempt takes a token from both. */
export class KeyedRateLimiter {
  private readonly global: TokenBucket;
  private readonly keys = new Map<string, TokenBucket>();

  constructor(
    private readonly limits: KeyedLimits,
    now: number,
  ) {
    this.global = new TokenBucket(limits.globalPerSec, limits.globalBurst, now);
  }

  /**
   * Takes one attempt for `key` (null: the global bucket only) at `now` (ms).
   * @returns `{allowed:true}`, or `{allowed:false, waitMs}`: ms until the refusing bucket has a token
   */
  attempt(key: string | null, now: number): { allowed: true } | { allowed: false; waitMs: number } {
    if (key !== null) {
      let bucket = this.keys.get(key);
      if (!bucket) {
        if (this.keys.size >= this.limits.maxKeys) this.forgetQuiet(now);
        bucket = new TokenBucket(this.limits.perKeyPerSec, this.limits.perKeyBurst, now);
        this.keys.set(key, bucket);
      }
      if (!bucket.take(now)) return { allowed: false, waitMs: bucket.waitMs(now) };
    }
    if (!this.global.take(now)) return { allowed: false, waitMs: this.global.waitMs(now) };
    return { allowed: true };
  }

  /** Keys whose buckets are held now. */
  get tracked(): number {
    return this.keys.size;
  }

  /** Drops the buckets of quiet keys (and, if all are busy, the oldest half). */
  private forgetQuiet(now: number): void {
    for (const [k, b] of this.keys) if (b.isFull(now)) this.keys.delete(k);
    if (this.keys.size < this.limits.maxKeys) return;
    let n = Math.floor(this.keys.size / 2);
    for (const k of this.keys.keys()) {
      if (n-- <= 0) break;
      this.keys.delete(k);
    }
  }
}
