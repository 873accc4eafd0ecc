import { createInterface } from 'node:readline';
import { PassThrough } from 'node:stream';
import { lazyConstructor, lazyObject, loadWithLazyGlobals, withReplaced } from './lazy-globals';

const OPTIONS: Intl.DateTimeFormatOptions = { year: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric', day: '2-digit', month: '2-digit' };

describe('lazy globals', () => {
  it('a lazy object loads on first use and then behaves as the real one', () => {
    let loads = 0;
    const o = lazyObject(() => {
      loads++;
      return {
        a: 1,
        get double() {
          return this.a * 2;
        },
      };
    });
    expect(loads).toBe(0);
    expect(o.double).toBe(2);
    o.a = 5;
    expect(o.double).toBe(10);
    expect('a' in o).toBe(true);
    expect(Object.keys(o)).toEqual(['a', 'double']);
    expect(loads).toBe(1);
  });

  it('a lazy stream works as the stream (readline reads lines through it)', async () => {
    const real = new PassThrough();
    const s = lazyObject(() => real);
    expect(s instanceof PassThrough).toBe(true);
    const lines: string[] = [];
    const rl = createInterface({ input: s });
    rl.on('line', (l) => lines.push(l));
    const closed = new Promise((r) => rl.once('close', r));
    real.end('one\ntwo\n');
    await closed;
    expect(lines).toEqual(['one', 'two']);
  });

  it('a lazy Intl.DateTimeFormat constructs on first use and formats as the real one', () => {
    let constructed = 0;
    const Counting = new Proxy(Intl.DateTimeFormat, {
      construct: (T, args: [string?, Intl.DateTimeFormatOptions?]) => {
        constructed++;
        return new T(...args);
      },
    });
    const Lazy = lazyConstructor(Counting);
    const f = new Lazy(undefined, OPTIONS);
    expect(constructed).toBe(0);
    const real = new Intl.DateTimeFormat(undefined, OPTIONS);
    const t = Date.UTC(2024, 1, 29, 12, 34, 56);
    expect(f.format(t)).toBe(real.format(t));
    expect(constructed).toBe(1);
    expect(f.formatToParts(t)).toEqual(real.formatToParts(t));
    expect(f.resolvedOptions()).toEqual(real.resolvedOptions());
    expect(f instanceof Intl.DateTimeFormat).toBe(true);
    expect(constructed).toBe(1);
    expect(Lazy.supportedLocalesOf(['en-US'])).toEqual(Intl.DateTimeFormat.supportedLocalesOf(['en-US']));
    // Invalid arguments throw on first use.
    const bad = new Lazy(undefined, { timeZone: 'Nowhere/Nothing' });
    expect(() => bad.format(t)).toThrow(RangeError);
  });

  it('replaces a property while loading and puts its descriptor back, also when loading throws', () => {
    let reads = 0;
    const owner = {};
    const get = () => ++reads;
    Object.defineProperty(owner, 'x', { configurable: true, enumerable: true, get });
    const saved = Object.getOwnPropertyDescriptor(owner, 'x');
    let seen: unknown;
    const standIn = (real: () => unknown) => ({ real });
    const out = withReplaced(owner, 'x', standIn, () => {
      seen = (owner as { x: unknown }).x;
      return 7;
    });
    expect(out).toBe(7);
    expect(reads).toBe(0);
    expect((seen as { real: () => unknown }).real()).toBe(1);
    expect(Object.getOwnPropertyDescriptor(owner, 'x')).toEqual(saved);
    expect(() =>
      withReplaced(owner, 'x', standIn, () => {
        throw new Error('boom');
      }),
    ).toThrow('boom');
    expect(Object.getOwnPropertyDescriptor(owner, 'x')).toEqual(saved);
    // A property that is not there, or cannot be redefined, is left alone.
    expect(withReplaced(owner, 'y', standIn, () => 'y' in owner)).toBe(false);
    Object.defineProperty(owner, 'z', { configurable: false, value: 3 });
    expect(withReplaced(owner, 'z', standIn, () => (owner as { z: number }).z)).toBe(3);
  });

  it('loads a module with process.stdin and Intl.DateTimeFormat deferred, and leaves both as they were', () => {
    const stdin = Object.getOwnPropertyDescriptor(process, 'stdin');
    const dtf = Intl.DateTimeFormat;
    let reads = 0;
    const fake = new PassThrough();
    Object.defineProperty(process, 'stdin', { configurable: true, enumerable: true, get: () => (reads++, fake) });
    try {
      const mod = loadWithLazyGlobals(['Intl.DateTimeFormat', 'process.stdin'], () => ({
        input: process.stdin,
        again: process.stdin,
        formatter: new Intl.DateTimeFormat(undefined, OPTIONS),
        Dtf: Intl.DateTimeFormat,
      }));
      expect(reads).toBe(0);
      expect(mod.input).toBe(mod.again);
      expect(mod.Dtf).not.toBe(dtf);
      expect(Intl.DateTimeFormat).toBe(dtf);
      expect(process.stdin).toBe(fake);
      expect(reads).toBe(1);
      expect(mod.input.readable).toBe(true);
      expect(reads).toBe(2);
      expect(mod.formatter.format(0)).toBe(new Intl.DateTimeFormat(undefined, OPTIONS).format(0));
    } finally {
      if (stdin) Object.defineProperty(process, 'stdin', stdin);
    }
  });
});
