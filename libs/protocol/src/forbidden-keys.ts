/**
 * Keys never accepted in a message (docs/protocol.md "Envelope and errors", docs/protocol.md "Transport"): `__proto__`,
 * `constructor` and `prototype` reach object prototypes in JavaScript. The one rule is applied
 * by the envelope parser ({@link ./envelope}) to every request on both endpoints, before any
 * handler runs; it lives apart from the DTO validation so that code which only needs this
 * check does not load class-validator.
 */

/** Keys never accepted in a payload: they reach object prototypes in JavaScript. */
export const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/** Appends a member to a path: `a` + `b` -> `a.b`, an array index as `a[0]`. */
function childPath(path: string, key: string, parentIsArray: boolean): string {
  if (parentIsArray) return `${path}[${key}]`;
  return path ? `${path}.${key}` : key;
}

/**
 * The path of the first forbidden key (`__proto__`, `constructor`, `prototype`) among the own
 * keys of a JSON value, at any depth, e.g. `platform.constructor` or
 * `services[0].ops.__proto__`; null when there is none. `JSON.parse` creates `__proto__` as an
 * own property, so own keys are what is checked. Iterative, so deep input cannot overflow the
 * stack; paths are only built for objects and arrays.
 * @param value a decoded JSON value
 * @param prefix the path of `value` itself (`''` for the top level)
 */
export function forbiddenKeyPath(value: unknown, prefix = ''): string | null {
  const stack: Array<[object, string]> = [];
  if (typeof value === 'object' && value !== null) stack.push([value, prefix]);
  while (stack.length > 0) {
    const [v, path] = stack.pop()!;
    const isArray = Array.isArray(v);
    for (const key of Object.keys(v)) {
      if (!isArray && FORBIDDEN_KEYS.has(key)) return childPath(path, key, false);
      const child = (v as Record<string, unknown>)[key];
      if (typeof child === 'object' && child !== null) stack.push([child, childPath(path, key, isArray)]);
    }
  }
  return null;
}
