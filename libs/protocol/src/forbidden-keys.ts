/**
 * Keys never accepted in a payload (PROTOCOL.md 3): `__proto__`, `constructor` and `prototype`
 * reach object prototypes in JavaScript. Kept apart from the DTO validation so that code which
 * only needs this check does not load class-validator.
 */

/** Keys never accepted in a payload: they reach object prototypes in JavaScript. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * The path of the first forbidden key (`__proto__`, `constructor`, `prototype`) in a JSON
 * value, e.g. `access_policy.constructor`, or null. Iterative, so deep input cannot overflow.
 */
export function forbiddenKeyPath(value: unknown): string | null {
  const stack: Array<[unknown, string]> = [[value, '']];
  while (stack.length > 0) {
    const [v, path] = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    for (const key of Object.keys(v)) {
      const child = path ? `${path}.${key}` : key;
      if (FORBIDDEN_KEYS.has(key)) return child;
      stack.push([(v as Record<string, unknown>)[key], child]);
    }
  }
  return null;
}
