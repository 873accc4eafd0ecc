/**
 * What `fn` throws, for a test to look at (its class, its fields).
 * @throws Error when `fn` returns instead of throwing
 */
export function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw, but it returned');
}
