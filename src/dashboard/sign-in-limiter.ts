/**
 * Rate limit of dashboard sign-in attempts (a wrong token at sign-in is
 * refused, rate limited, logged without the token). Every attempt, right or wrong, takes one
 * token from the bucket of its remote address and one from a bucket for the whole process; an
 * empty bucket refuses the attempt before the token is even compared, so guessing cannot go
 * faster than the refill.
 */
import { KeyedRateLimiter } from '../common/rate-limit';

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

/** Decides whether a sign-in attempt may be checked now. */
export class SignInLimiter {
  private readonly limiter: KeyedRateLimiter;

  constructor(limits: SignInLimits = DEFAULT_SIGN_IN_LIMITS, now = Date.now()) {
    this.limiter = new KeyedRateLimiter(
      {
        perKeyPerSec: limits.perAddressPerMin / 60,
        perKeyBurst: limits.perAddressBurst,
        globalPerSec: limits.globalPerMin / 60,
        globalBurst: limits.globalBurst,
        maxKeys: limits.maxAddresses,
      },
      now,
    );
  }

  /**
   * Takes one attempt for `address` at `now` (ms).
   * @returns `{allowed:true}`, or `{allowed:false, retryAfterS}` (whole seconds, at least 1)
   */
  attempt(address: string, now = Date.now()): { allowed: true } | { allowed: false; retryAfterS: number } {
    const r = this.limiter.attempt(address, now);
    return r.allowed ? r : { allowed: false, retryAfterS: Math.max(1, Math.ceil(r.waitMs / 1000)) };
  }
}
