/**
 * Start-up of the command-line programs from a bundle: what each
 * program's `main.js` calls first.
 *
 * `npm run build` (tsc, then `scripts/bundle-clis.ts`) bundles a program's module
 * `program.js` and what it imports into one file, `program.bundle.js`, beside `main.js`; the
 * bundle's last line is `//# svc-bundle-id=<16 hex digits of its SHA-256>`. It then runs the
 * program once with {@link WRITE_CODE_CACHE_ENV} set, which records V8's code cache of the
 * bundle (the bytecode of every function that run compiled) as
 * `program.bundle.<id>.v8cache`. Node 20 has no compile cache of its own
 * (`module.enableCompileCache` came in 22). Reading one file and deserializing bytecode instead
 * of resolving, reading and compiling about 950 modules is most of the start-up time saved.
 *
 * Behaviour is the program's own either way: without a bundle, or with one older than
 * `program.js` or than tsc's last build (`dist/.tsbuildinfo`: `tsc` ran after the bundling step),
 * `main.js` runs `program.js` as before; without a cache for this bundle's id, or with one V8
 * rejects (another node version or V8 flags), the bundle is compiled as usual. The id in the
 * cache's name ties it to the bundle's exact content (V8's own check only compares the source
 * length).
 *
 * `SVC_BUNDLE_TRACE=1` prints one line on stderr saying what was loaded and whether the cache
 * was accepted (tests use it).
 */
import { isAscii } from 'node:buffer';
import { readdirSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import Module from 'node:module';
import { dirname, join } from 'node:path';
import * as vm from 'node:vm';
import { RECORDING_CODE_CACHE } from './data-path-gc';
import type { OptionSpec } from './option-specs';

/** The bundle's file name, in the directory of the program's `main.js`. */
export const BUNDLE_FILE = 'program.bundle.js';
/** Marks the last line of a bundle: the id follows. */
export const BUNDLE_ID_MARK = '\n//# svc-bundle-id=';
/** Length of a bundle id, hex digits. */
export const BUNDLE_ID_LENGTH = 16;
/**
 * Set to `1` to (re)write the code cache at the end of this run, with what this run compiled
 * added to what the cache it started from held; removed from the environment.
 */
export const WRITE_CODE_CACHE_ENV = 'SVC_BUNDLE_WRITE_CODE_CACHE';
/** Set to `1` to print what was loaded on stderr. */
export const TRACE_ENV = 'SVC_BUNDLE_TRACE';

/** The variables every bundled program (`svc-control`, `svc-fs-mount`, `svc-fs-node`) reads at start (docs/configuration.md). */
export const BUNDLED_PROGRAM_OPTIONS = {
  trace: { env: TRACE_ENV, description: '`1`: print on stderr which bundle was loaded and whether its code cache was accepted' },
  writeCodeCache: {
    env: WRITE_CODE_CACHE_ENV,
    description: '`1`: record the code cache of the bundle at the end of the run (the build sets it; removed from the environment)',
  },
} satisfies Record<string, OptionSpec>;

/** The code cache file of the bundle `bundleFile` whose id is `id`. */
export function codeCacheFileOf(bundleFile: string, id: string): string {
  return `${bundleFile.replace(/\.js$/, '')}.${id}.v8cache`;
}

/** The id written in the last line of a bundle's source; null when it has none. */
export function bundleIdOf(source: string): string | null {
  const at = source.lastIndexOf(BUNDLE_ID_MARK);
  if (at < 0) return null;
  const id = source.slice(at + BUNDLE_ID_MARK.length, at + BUNDLE_ID_MARK.length + BUNDLE_ID_LENGTH);
  return /^[0-9a-f]+$/.test(id) && id.length === BUNDLE_ID_LENGTH ? id : null;
}

/** Modification time of `file`, ms; null when it does not exist. */
function mtimeMs(file: string): number | null {
  return statSync(file, { throwIfNoEntry: false })?.mtimeMs ?? null;
}

/**
 * The reason the bundle in `dir` is not to be run (missing, or older than what tsc last wrote);
 * null when it is current.
 */
function staleness(dir: string, bundleFile: string): string | null {
  const bundled = mtimeMs(bundleFile);
  if (bundled === null) return `no ${bundleFile}`;
  // dist/.tsbuildinfo: tsconfig.build.json's tsBuildInfoFile, three levels above dist/apps/<app>/src.
  for (const built of [join(dir, 'program.js'), join(dir, '..', '..', '..', '.tsbuildinfo')]) {
    const t = mtimeMs(built);
    if (t !== null && t > bundled) return `${bundleFile} is older than ${built}`;
  }
  return null;
}

/**
 * Runs the program of the `main.js` in `dir`: its bundle `dir/program.bundle.js` with the bundle's
 * code cache when there is one, else (no bundle, or a stale one) `fallback()`, which requires
 * `./program`.
 *
 * The bundle runs as a CommonJS module whose `require` resolves from the bundle's directory (so
 * the packages left out of the bundle, and native addons, load from `node_modules` as before) and
 * whose `__dirname` is `dir`, the directory `program.js` was in.
 * Errors thrown by the program propagate as they would from `require('./program')`.
 * @param dir the directory of the calling `main.js` (`__dirname`)
 * @param fallback runs the unbundled program
 */
export function runBundled(dir: string, fallback: () => unknown): void {
  const file = join(dir, BUNDLE_FILE);
  const trace = process.env[TRACE_ENV] === '1';
  const writeCache = process.env[WRITE_CODE_CACHE_ENV] === '1';
  delete process.env[WRITE_CODE_CACHE_ENV];
  const stale = staleness(dir, file);
  if (stale !== null) {
    if (trace) process.stderr.write(`svc-bundle: ${stale}; running ${join(dir, 'program.js')}\n`);
    fallback();
    return;
  }
  // esbuild writes ASCII (non-ASCII characters escaped): decoded as latin1, a plain copy, when
  // it is (1 ms less than UTF-8 decoding for the 2 MB of a client's bundle).
  const bytes = readFileSync(file);
  const source = isAscii(bytes) ? bytes.toString('latin1') : bytes.toString('utf8');
  const id = bundleIdOf(source);
  const cacheFile = id === null ? null : codeCacheFileOf(file, id);
  let cachedData: Buffer | undefined;
  if (cacheFile !== null) {
    try {
      cachedData = readFileSync(cacheFile);
    } catch {
      // no cache for this bundle: compile it
    }
  }
  const script = new vm.Script(Module.wrap(source), {
    filename: file,
    cachedData,
    // `import()` inside the bundle (optional ESM packages of the frameworks) as in any module;
    // the constant exists from node 20.12.
    importModuleDynamically: vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  if (trace) {
    const cache = cachedData === undefined ? 'none' : script.cachedDataRejected ? 'rejected' : 'accepted';
    process.stderr.write(`svc-bundle: ${file} id ${id ?? 'none'} code cache ${cache}\n`);
  }
  if (writeCache && cacheFile !== null) {
    // V8's flags stay as they are in this run (libs/ops/src/data-path-gc.ts): the cache carries them.
    (globalThis as Record<symbol, unknown>)[RECORDING_CODE_CACHE] = true;
    process.once('exit', () => writeCodeCache(script, file, cacheFile));
  }
  const mod = new Module(file, require.main);
  mod.filename = file;
  const run = script.runInThisContext() as (exports: unknown, require: NodeJS.Require, module: Module, filename: string, dirname: string) => void;
  run.call(mod.exports, mod.exports, Module.createRequire(file), mod, file, dirname(file));
}

/** Writes the code cache of `script` to `cacheFile` (atomically) and removes the bundle's older caches. */
function writeCodeCache(script: vm.Script, bundleFile: string, cacheFile: string): void {
  const tmp = `${cacheFile}.${process.pid}.tmp`;
  writeFileSync(tmp, script.createCachedData());
  renameSync(tmp, cacheFile);
  const dir = dirname(bundleFile);
  const prefix = `${BUNDLE_FILE.replace(/\.js$/, '')}.`;
  for (const name of readdirSync(dir)) {
    if (name.startsWith(prefix) && name.endsWith('.v8cache') && join(dir, name) !== cacheFile) unlinkSync(join(dir, name));
  }
}
