/**
 * Rate limit of dashboard sign-in attempts (issue 13 "Bad input": a wrong token at sign-in is
 * refused, rate limited, logged without the token). Every attempt, right or wrong, takes one
 * token from the bucket of its remote address and one from a bucket for the whole process; an
 * empty bucket refuses the attempt before the token is even compared, so guessing cannot go
 * faster than the refill.
 */

/** Limits: tokens a minute and burst, per remote address and for the process. */
export interface SignInLimits {
  perAddressPerMin: number;
  perAddressBurst: number;
  globalPerMin: number;
  globalBurst: number;
  /** Largest number of addresses tracked (quiet ones are forgotten first). */
  maxAddresses: number;
}

/** 10 attempts at once then 6 a minute per address; 300 at once then 60 a minute in all. */
export const DEFAULT_SIGN_IN_LIMITS: SignInLimits = { perAddressPerMin: 6, perAddressBurst: 10, globalPerMin: 60, globalBurst: 300, maxAddresses: 10_000 };

/** A token bucket refilled continuously; times in ms. */
class Bucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly perMin: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  /** Takes a token at `now`; false when empty. */
  take(now: number): boolean {
    this.refill(now);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Ms until one token is there again. */
  waitMs(now: number): number {
    this.refill(now);
    return this.tokens >= 1 ? 0 : Math.ceil(((1 - this.tokens) * 60_000) / this.perMin);
  }

  full(now: number): boolean {
    this.refill(now);
    return this.tokens >= this.burst;
  }

  private refill(now: number): void {
    const elapsed = Math.max(0, now - this.last);
    this.last = now;
    this.tokens = Math.min(this.burst, this.tokens + (elapsed * this.perMin) / 60_000);
  }
}

/** Decides whether a sign-in attempt may be checked now. */
export class SignInLimiter {
  private readonly global: Bucket;
  private readonly addresses = new Map<string, Bucket>();

  constructor(
    private readonly limits: SignInLimits = DEFAULT_SIGN_IN_LIMITS,
    now = Date.now(),
  ) {
    this.global = new Bucket(limits.globalPerMin, limits.globalBurst, now);
  }

  /**
   * Takes one attempt for `address` at `now` (ms).
   * @returns `{allowed:true}`, or `{allowed:false, retryAfterS}` (whole seconds, at least 1)
   */
  attempt(address: string, now = Date.now()): { allowed: true } | { allowed: false; retryAfterS: number } {
    let bucket = this.addresses.get(address);
    if (!bucket) {
      if (this.addresses.size >= this.limits.maxAddresses) this.forget(now);
      bucket = new Bucket(this.limits.perAddressPerMin, this.limits.perAddressBurst, now);
      this.addresses.set(address, bucket);
    }
    if (!bucket.take(now)) return { allowed: false, retryAfterS: Math.max(1, Math.ceil(bucket.waitMs(now) / 1000)) };
    if (!this.global.take(now)) return { allowed: false, retryAfterS: Math.max(1, Math.ceil(this.global.waitMs(now) / 1000)) };
    return { allowed: true };
  }

  /** Forgets addresses whose bucket is full again, then, if still too many, the oldest half. */
  private forget(now: number): void {
    for (const [a, b] of this.addresses) if (b.full(now)) this.addresses.delete(a);
    let n = this.addresses.size >= this.limits.maxAddresses ? Math.floor(this.addresses.size / 2) : 0;
    for (const a of this.addresses.keys()) {
      if (n-- <= 0) break;
      this.addresses.delete(a);
    }
  }
}
