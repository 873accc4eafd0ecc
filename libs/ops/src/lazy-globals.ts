/**
 * Start-up work that package modules do when they are loaded, deferred to first use, in the
 * command-line programs' bundles (scripts/bundle-clis.ts). Nest's logger modules build an
 * `Intl.DateTimeFormat` when loaded (which loads ICU's locale data), and nest-commander's module
 * reads `process.stdin` (Node then creates the stdin stream and the modules it needs); our
 * programs use neither at start-up.
 *
 * The bundles load such a module through {@link loadWithLazyGlobals}: while the module's body
 * (and whatever it requires for the first time) runs, the named globals are stand-ins that
 * create the real object on first use of the value read, and forward everything to it. The
 * package's source is bundled unchanged; only what its body reads from these globals while it
 * loads is a stand-in. Afterwards the globals are exactly what they were.
 */

/** A global that {@link loadWithLazyGlobals} can replace while a module loads. */
export type LazyGlobal = 'Intl.DateTimeFormat' | 'process.stdin';

/**
 * An object that stands for the one `load()` returns, calling `load` on the first operation on
 * it (a property read or write, `in`, its keys, its prototype) and forwarding that operation and
 * every later one to the real object. Property reads get the real object as receiver.
 * @param bindMethods functions read from it are bound to the real object (for objects whose
 *   methods need their own internal slots, such as `Intl.DateTimeFormat`'s); otherwise they are
 *   returned as they are and called on the stand-in, which forwards their property accesses
 */
export function lazyObject<T extends object>(load: () => T, bindMethods = false): T {
  let real: T | undefined;
  const it = (): T => (real ??= load());
  const bound = new WeakMap<object, unknown>();
  const handler: ProxyHandler<T> = {
    get: (_, k) => {
      const r = it();
      const v: unknown = Reflect.get(r, k);
      if (!bindMethods || typeof v !== 'function' || k === 'constructor') return v;
      if (!bound.has(v)) bound.set(v, (v as (...a: unknown[]) => unknown).bind(r));
      return bound.get(v);
    },
    set: (_, k, v) => Reflect.set(it(), k, v),
    has: (_, k) => Reflect.has(it(), k),
    deleteProperty: (_, k) => Reflect.deleteProperty(it(), k),
    defineProperty: (_, k, d) => Reflect.defineProperty(it(), k, d),
    ownKeys: () => Reflect.ownKeys(it()),
    // Reported configurable: a proxy may not report a non-configurable property its target lacks.
    getOwnPropertyDescriptor: (_, k) => {
      const d = Reflect.getOwnPropertyDescriptor(it(), k);
      if (d) d.configurable = true;
      return d;
    },
    getPrototypeOf: () => Reflect.getPrototypeOf(it()),
    setPrototypeOf: (_, p) => Reflect.setPrototypeOf(it(), p),
  };
  return new Proxy({} as T, handler);
}

/**
 * A stand-in for the constructor `Real` (`Intl.DateTimeFormat`): `new` (or a call) returns a
 * {@link lazyObject} that constructs the real instance with the same arguments on first use;
 * its static members are `Real`'s. Invalid arguments throw on that first use, not at once.
 */
export function lazyConstructor<C extends abstract new (...args: never[]) => object>(Real: C): C {
  return new Proxy(Real, {
    construct: (_, args) => lazyObject(() => Reflect.construct(Real, args) as object, true),
    apply: (_, self, args) => lazyObject(() => Reflect.apply(Real as unknown as (...a: unknown[]) => object, self, args), true),
  });
}

/**
 * Runs `load()` with `owner[key]` replaced by `standIn(real)`, where `real()` reads the property
 * as it was (its value, or its getter called on `owner`), and then puts the property back as it
 * was (its descriptor), also when `load` throws. A property that does not exist or cannot be
 * redefined is left as it is.
 * @returns what `load` returns
 */
export function withReplaced<T>(owner: object, key: string, standIn: (real: () => unknown) => unknown, load: () => T): T {
  const saved = Object.getOwnPropertyDescriptor(owner, key);
  if (saved === undefined || !saved.configurable) return load();
  const real = (): unknown => (saved.get ? saved.get.call(owner) : saved.value);
  Object.defineProperty(owner, key, { configurable: true, enumerable: saved.enumerable, writable: true, value: standIn(real) });
  try {
    return load();
  } finally {
    Object.defineProperty(owner, key, saved);
  }
}

/**
 * Runs `load()` (a `require` of a package module) with each of `globals` replaced by a stand-in
 * ({@link withReplaced}): `Intl.DateTimeFormat` by a {@link lazyConstructor} of it, `process.stdin`
 * by a {@link lazyObject} that reads the real `process.stdin` on first use. One stand-in per
 * global for the whole call: every read of `process.stdin` during it gets the same object.
 * @returns what `load` returns (the module's exports)
 */
export function loadWithLazyGlobals<T>(globals: LazyGlobal[], load: () => T): T {
  return globals.reduceRight<() => T>((inner, g) => {
    switch (g) {
      case 'Intl.DateTimeFormat':
        return () => withReplaced(Intl, 'DateTimeFormat', (real) => lazyConstructor(real() as typeof Intl.DateTimeFormat), inner);
      case 'process.stdin':
        return () => withReplaced(process, 'stdin', (real) => lazyObject(() => real() as NodeJS.ReadStream), inner);
    }
  }, load)();
}
