/**
 * Exponential backoff with full jitter, for reconnecting to the control plane and polling a
 * join request while the control plane is unreachable.
 */
export class Backoff {
  private attempt = 0;

  /**
   * @param baseMs first delay, ms
   * @param maxMs largest delay, ms
   * @param random source of randomness in [0,1) (tests may fix it)
   */
  constructor(
    private readonly baseMs: number,
    private readonly maxMs: number,
    private readonly random: () => number = Math.random,
  ) {}

  /** The ceiling of the next delay, ms (before jitter). */
  get ceilingMs(): number {
    return Math.min(this.maxMs, this.baseMs * 2 ** Math.min(this.attempt, 30));
  }

  /** The next delay, ms: uniformly between half the ceiling and the ceiling; then the ceiling doubles. */
  next(): number {
    const ceiling = this.ceilingMs;
    this.attempt++;
    return Math.round(ceiling / 2 + (this.random() * ceiling) / 2);
  }

  /** Back to the first step after a success. */
  reset(): void {
    this.attempt = 0;
  }

  /** How many failures in a row. */
  get failures(): number {
    return this.attempt;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}
