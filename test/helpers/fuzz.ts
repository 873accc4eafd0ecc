/**
 * What the e2e fuzz tests share: the seed of a run (`FUZZ_SEED` replays one), picking from lists,
 * values of every wrong kind, and sending frame after frame while counting what answered each
 * (a reply or the peer's close) and which replies were internal errors.
 */
import { prng } from '../support/prng';
import { RawPeer, Received } from './raw-ws';

/** The seed of a fuzz run: `FUZZ_SEED` when set (to replay a run), else a new one. */
export function fuzzSeed(): number {
  return Number(process.env.FUZZ_SEED ?? Date.now() % 1e9);
}

/**
 * A function picking an element of a list at random (by `rand`, numbers in [0, 1)), as a deep
 * copy: what a test does to it never reaches the list (nor makes it circular).
 */
export function picker(rand: () => number): <T>(xs: readonly T[]) => T {
  return (xs) => structuredClone(xs[Math.floor(rand() * xs.length)]);
}

/**
 * Values of the wrong kind for any field: null, a boolean, numbers out of every range, empty and
 * 70,000-character strings, empty containers, and prototype pollution both as an object literal
 * makes it (the prototype set) and as JSON.parse makes it (an own `__proto__` member).
 */
export const NASTY_VALUES: readonly unknown[] = [
  null,
  true,
  -1,
  0,
  2 ** 53,
  1e308,
  NaN,
  '',
  'x'.repeat(70_000),
  [],
  {},
  { __proto__: { polluted: true } },
  JSON.parse('{"__proto__":{"polluted":true}}'),
];

/** How {@link FuzzRun.send} tells a reply and an internal error. */
export interface ReplyRules {
  /** How long to wait for each message, ms. */
  timeoutMs: number;
  /** Why message `m` is an internal error (a description for the failure), or null when it is not. */
  internalError(m: Received): string | null;
  /** Whether message `m` is the reply that ends the wait; default: the first message is. */
  isReply?(m: Received): boolean;
}

/** A fuzz run of `frames` frames: its seed and random numbers, and what answered the frames sent. */
export class FuzzRun {
  readonly seed = fuzzSeed();
  readonly rand = prng(this.seed);
  /** Frames that got a reply. */
  answered = 0;
  /** Frames after which the peer was closed instead. */
  closes = 0;
  /** The replies that were internal errors (there must be none: bad input is never a server fault). */
  readonly internal: string[] = [];

  constructor(readonly frames: number) {}

  /**
   * Sends `frame`, number `i` of the run, on `peer`, and waits for its reply or for the peer's
   * close, counting which. Every message until the reply goes through `rules.internalError`.
   * @throws Error naming the seed and the frame when neither comes within `rules.timeoutMs`
   */
  async send(i: number, peer: RawPeer, frame: string | Buffer, rules: ReplyRules): Promise<void> {
    let next = peer.messages.length;
    peer.send(frame);
    try {
      for (;;) {
        const m = await peer.nth(next++, rules.timeoutMs);
        const why = rules.internalError(m);
        if (why !== null) this.internal.push(`frame ${i}: ${String(frame).slice(0, 200)} -> ${why}`);
        if (rules.isReply?.(m) ?? true) break;
      }
      this.answered++;
    } catch (e) {
      if (peer.closeCode === null)
        throw new Error(`seed ${this.seed}, frame ${i}: no reply and no close for ${String(frame).slice(0, 200)}: ${(e as Error).message}`);
      this.closes++;
    }
  }

  /** Checks that every frame got a reply or a close and that no reply was an internal error (the seed in the failure). */
  expectNoInternalErrors(): void {
    expect(this.answered + this.closes).toBe(this.frames);
    expect({ seed: this.seed, internal: this.internal }).toEqual({ seed: this.seed, internal: [] });
  }
}
