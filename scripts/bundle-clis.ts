/**
 * Build step after `tsc` (`npm run build`): bundles each program's
 * `dist/apps/<app>/src/program.js` with what it imports into `dist/apps/<app>/src/program.bundle.js`
 * (esbuild, CommonJS, node 20, a source map beside it), stamps the bundle with its content id,
 * then runs the program a few times to record V8's code cache of the bundle
 * (`program.bundle.<id>.v8cache`). `main.js` runs the bundle with that cache
 * (libs/ops/src/bundled-program.ts). Exits 1, naming the program, when a bundle cannot be built
 * or no code cache was recorded.
 *
 * Left out of the bundles, so required from node_modules at run time as before if the program
 * ever asks for them: native addons (their loaders find the binary next to their own files),
 * packages that are not installed (the frameworks' optional integrations, which they require in
 * a try), and, for the command-line clients, what the frameworks load only on request (Nest's
 * HTTP platform and validation packages, nest-commander's shell completion). `inquirer`
 * (nest-commander's prompts) and `cosmiconfig` (its plugin files) are replaced by stand-ins that
 * load the real package on first use: nest-commander requires both at start-up, our commands use
 * neither (together about 300 files).
 *
 * Start-up work deferred to first use inside the bundles (measured on
 * `svc-fs-mount cat`: 412 modules run, code cache 1.02 MB): modules the
 * frameworks load but a command-line program does not run ({@link DEFERRED}), Node built-ins
 * the clients use on some paths only ({@link LAZY_BUILTINS}), ws's native masking for small
 * frames ({@link smallFrameMask}), optional addons that are not installed
 * ({@link nativeAddons}), and work some packages do when loaded ({@link LAZY_GLOBALS}).
 *
 * Usage: `node dist/scripts/bundle-clis.js [app ...]` (default: every program below).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import Module from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { build, Plugin } from 'esbuild';
import { BUNDLE_FILE, BUNDLE_ID_LENGTH, BUNDLE_ID_MARK, codeCacheFileOf, WRITE_CODE_CACHE_ENV } from '../libs/ops/src/bundled-program';
import type { LazyGlobal } from '../libs/ops/src/lazy-globals';

const ROOT = resolve(__dirname, '..', '..');

/** One run of a program that records its code cache. */
interface WarmRun {
  args: string[];
  /** A server: stopped with SIGTERM once it prints `listening on`. Other runs end by themselves. */
  untilListening?: boolean;
}

/** A program to bundle and the runs that record its code cache (each should go through much of its start-up). */
interface Program {
  app: string;
  warmRuns: WarmRun[];
  /** Built-in modules loaded on first use ({@link LAZY_BUILTINS}); none for a server. */
  lazyBuiltins: string[];
  /** Packages left out of this bundle beyond {@link NATIVE}. */
  external: string[];
}

/**
 * A WebSocket URL nothing listens on (port 1 on loopback): the recording runs of the clients go
 * through option parsing, the command and its connection failure without a server.
 */
const NOWHERE = 'ws://127.0.0.1:1';

/**
 * What the frameworks load only when asked (Nest: an HTTP application, validation pipes;
 * nest-commander: shell completion, which brings prettier): not the clients' case.
 */
const ON_REQUEST = ['@nestjs/platform-express', 'class-validator', 'class-transformer', '@fig/complete-commander'];

/**
 * Native addons: always left out of a bundle ({@link nativeAddons}). The first two are optional
 * (ws uses them when they are installed).
 */
const NATIVE = ['bufferutil', 'utf-8-validate', 'better-sqlite3'];

/**
 * Node built-in modules the command-line clients' packages require when loaded but use only on
 * some paths: `tls` and `https` (ws, for `wss://` only), `zlib` (ws's permessage-deflate, which
 * the clients do not negotiate), `child_process` (commander's executable subcommands; the
 * mount's fusermount), `fs/promises` (the FUSE command's mount point checks). Each is
 * replaced in the client bundles by a stand-in that loads the module on first use (about 6 ms of
 * Node's own module compilation at every start otherwise).
 */
const LAZY_BUILTINS = ['tls', 'https', 'zlib', 'child_process', 'fs/promises'];

/** The programs; `{export}` in a run's arguments is a temporary directory. */
const PROGRAMS: Program[] = [
  {
    app: 'svc-control',
    warmRuns: [{ args: ['--help'] }, { args: ['--url', `${NOWHERE}/`, '--auth-token', 'x', '--timeout-ms', '2000', 'ping'] }],
    external: ON_REQUEST,
    lazyBuiltins: LAZY_BUILTINS,
  },
  {
    app: 'svc-fs-mount',
    warmRuns: [{ args: ['--help'] }, { args: ['--endpoint', `a=${NOWHERE}/v2/fs#work@/a`, 'cat', '/a/x'] }],
    external: ON_REQUEST,
    lazyBuiltins: LAZY_BUILTINS,
  },
  {
    app: 'svc-fs-node',
    warmRuns: [{ args: ['--help'] }, { args: ['--port', '0', '--export', 'work={export}'], untilListening: true }],
    external: [],
    lazyBuiltins: [],
  },
];

/** Packages replaced by stand-ins that require the real package on first use of an export. */
const LAZY = ['inquirer', 'cosmiconfig'];

/** The package name of a bare module specifier (`@scope/name/sub` -> `@scope/name`); null for a path or builtin. */
function packageOf(spec: string): string | null {
  if (spec.startsWith('.') || spec.startsWith('/') || spec.startsWith('node:')) return null;
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/**
 * Where `spec` resolves from `dir` as Node's `require` resolves it (absolute path); null when it
 * does not (a package that is not installed).
 */
function resolvedFrom(spec: string, dir: string | undefined): string | null {
  try {
    return require.resolve(spec, { paths: [dir || ROOT] });
  } catch {
    return null;
  }
}

/** `names` as alternatives of a regular expression, each matched literally. */
function anyOf(names: string[]): string {
  return names.map((n) => n.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&')).join('|');
}

/** An esbuild filter matching exactly the module specifiers `names`. */
function exactly(names: string[]): RegExp {
  return new RegExp(`^(${anyOf(names)})$`);
}

/**
 * The esbuild plugin that leaves out the packages named in `external` and every package that
 * cannot be resolved from the importing file (not installed: the frameworks' optional
 * integrations, required in a try at run time, which then fails as it did unbundled).
 */
function externals(external: string[]): Plugin {
  const named = new Set(external);
  return {
    name: 'svc-externals',
    setup(b) {
      b.onResolve({ filter: /^[^./]/ }, (args) => {
        const pkg = packageOf(args.path);
        if (pkg === null || args.namespace === 'svc-lazy') return undefined;
        if (named.has(pkg)) return { path: args.path, external: true };
        return resolvedFrom(args.path, args.resolveDir) === null ? { path: args.path, external: true } : undefined;
      });
    },
  };
}

/**
 * The esbuild plugin of {@link NATIVE}: an addon installed at build time is left out of the
 * bundle (required from `node_modules` at run time); one that is not installed is replaced by a
 * module that throws Node's own "Cannot find module" error (code `MODULE_NOT_FOUND`) at once,
 * which is what its optional users (ws, in a try) see unbundled, without the search through
 * every `node_modules` directory up to `/` and its stack trace (about 2.5 ms at every start for
 * ws's two optional addons). Installing one of them later takes a new `npm run build`.
 */
function nativeAddons(names: string[]): Plugin {
  return {
    name: 'svc-native-addons',
    setup(b) {
      b.onResolve({ filter: exactly(names) }, (args) =>
        resolvedFrom(args.path, args.resolveDir) === null ? { path: args.path, namespace: 'svc-missing' } : { path: args.path, external: true },
      );
      // The bundle runs a module's body once: a second `require` returns its `module.exports`,
      // which then throws the same error on any use.
      b.onLoad({ filter: /.*/, namespace: 'svc-missing' }, (args) => ({
        contents: [
          `const e = Object.assign(new Error(${JSON.stringify(`Cannot find module '${args.path}'`)}), { code: 'MODULE_NOT_FOUND' });`,
          `module.exports = new Proxy({}, { get() { throw e; } });`,
          `throw e;`,
        ].join('\n'),
        loader: 'js',
      }));
    },
  };
}

/**
 * The source of a stand-in module for `real` (the module as loaded at build time, for its export
 * names): each export is a getter that requires `spec` on first use and reads the export from
 * it, or, for an export in `reExports`, requires only the module it comes from. `__esModule` is
 * copied as a value when `real` sets it, so TypeScript's and esbuild's interop helpers see the
 * same shape without loading anything.
 */
function standIn(real: Record<string, unknown>, spec: string, reExports = new Map<string, { from: string; prop: string }>()): string {
  const lines = [
    `let whole;`,
    `const load = () => (whole ??= require(${JSON.stringify(spec)}));`,
    `const def = (k, get) => Object.defineProperty(exports, k, { enumerable: true, get });`,
    real.__esModule ? `Object.defineProperty(exports, '__esModule', { value: true });` : '',
  ];
  for (const k of Object.keys(real)) {
    if (k === '__esModule') continue;
    const from = reExports.get(k);
    lines.push(
      from
        ? `def(${JSON.stringify(k)}, () => require(${JSON.stringify(from.from)})[${JSON.stringify(from.prop)}]);`
        : `def(${JSON.stringify(k)}, () => load()[${JSON.stringify(k)}]);`,
    );
  }
  return lines.join('\n');
}

/**
 * The esbuild plugin of {@link LAZY}: `require('<pkg>')` from the bundled code gets a
 * {@link standIn} that loads the package on first use (a real, external `require` from the
 * bundle's directory).
 */
function lazyPackages(names: string[]): Plugin {
  return {
    name: 'svc-lazy-packages',
    setup(b) {
      b.onResolve({ filter: exactly(names) }, (args) =>
        args.namespace === 'svc-lazy' ? { path: args.path, external: true } : { path: args.path, namespace: 'svc-lazy' },
      );
      b.onLoad({ filter: /.*/, namespace: 'svc-lazy' }, (args) => {
        // eslint-disable-next-line @typescript-eslint/no-require-imports -- the module named by the bundler, at build time
        const real = require(resolvedFrom(args.path, ROOT) ?? args.path) as Record<string, unknown>;
        return { contents: standIn(real, args.path), loader: 'js', resolveDir: ROOT };
      });
    },
  };
}

/**
 * The esbuild plugin of {@link LAZY_BUILTINS}: `require('<builtin>')` (or `node:<builtin>`)
 * from the bundled code gets a Proxy that requires the module on the first property access,
 * and then behaves as the module (get, has, keys, descriptors).
 */
function lazyBuiltins(names: string[]): Plugin {
  const filter = new RegExp(`^(node:)?(${anyOf(names)})$`);
  return {
    name: 'svc-lazy-builtins',
    setup(b) {
      b.onResolve({ filter }, (args) =>
        args.namespace === 'svc-lazy-builtin' ? { path: args.path, external: true } : { path: args.path.replace(/^node:/, ''), namespace: 'svc-lazy-builtin' },
      );
      b.onLoad({ filter: /.*/, namespace: 'svc-lazy-builtin' }, (args) => {
        const lines = [
          `let real;`,
          `const load = () => (real ??= require(${JSON.stringify(`node:${args.path}`)}));`,
          `module.exports = new Proxy({}, {`,
          `  get: (_, k) => load()[k],`,
          `  has: (_, k) => k in load(),`,
          `  ownKeys: () => Reflect.ownKeys(load()),`,
          `  getOwnPropertyDescriptor: (_, k) => { const d = Object.getOwnPropertyDescriptor(load(), k); if (d) d.configurable = true; return d; },`,
          `});`,
        ];
        return { contents: lines.join('\n'), loader: 'js', resolveDir: ROOT };
      });
    },
  };
}

/**
 * Bundled modules whose loading waits for the first use of one of their exports
 * ({@link deferredModules}), as paths under `node_modules`: what the frameworks require when
 * they are loaded but a command-line program does not run. rxjs (226 modules: Nest's core and
 * common packages require it when loaded, for interceptors, microservices and HTTP streaming);
 * Nest's HTTP application with its router, middleware and REPL (nest-commander builds an
 * application context); Nest's pipes, serializer and file streams (HTTP only).
 */
const DEFERRED = [
  'rxjs/dist/cjs/index.js',
  'rxjs/dist/cjs/operators/index.js',
  '@nestjs/core/nest-application.js',
  '@nestjs/core/router/index.js',
  '@nestjs/core/middleware/index.js',
  '@nestjs/core/repl/index.js',
  '@nestjs/common/pipes/index.js',
  '@nestjs/common/serializer/index.js',
  '@nestjs/common/file-stream/index.js',
];

/**
 * The real path of each package file `files` names (paths under `node_modules`), as Node's and
 * esbuild's resolution return them (`node_modules` may be a symbolic link).
 * @throws Error naming the first file that does not exist (a dependency update moved or removed it)
 */
function packageFiles(files: string[]): Map<string, string> {
  const real = new Map<string, string>();
  for (const f of files) {
    try {
      real.set(realpathSync(join(ROOT, 'node_modules', f)), f);
    } catch {
      throw new Error(`node_modules/${f} does not exist: the list naming it in scripts/bundle-clis.ts is out of date`);
    }
  }
  return real;
}

/** What each module file loaded in this process required, in order: file -> [specifier, exports]. */
const requiredBy = new Map<string, Array<[string, unknown]>>();

/**
 * Records every `require` made from here on by a module file ({@link requiredBy}), the
 * modules already loaded included. Called once, before any deferred module is loaded.
 */
function recordRequires(): void {
  const proto = Module.prototype;
  const original = Object.getOwnPropertyDescriptor(proto, 'require')!.value as (this: Module, id: string) => unknown;
  proto.require = function (this: Module, id: string): unknown {
    const exports = original.call(this, id);
    const list = requiredBy.get(this.filename) ?? [];
    list.push([id, exports]);
    requiredBy.set(this.filename, list);
    return exports;
  };
}

/**
 * Where each export of the module `file` that is a getter comes from (a re-export: TypeScript's
 * `Object.defineProperty(exports, name, { get })` and tslib's `__exportStar`): export name -> the
 * specifier the module required and the property of that module's exports holding the same
 * value (the same name first), found from what the module required when it was loaded
 * ({@link requiredBy}) and the values themselves, not from its source text. Exports that are
 * plain values, or whose value no required module holds, are not in the map.
 * @param exports the module's exports, loaded in this process after {@link recordRequires}
 * @throws Error when the module's requires were not recorded
 */
function reExportsOf(file: string, exports: Record<string, unknown>): Map<string, { from: string; prop: string }> {
  const required = requiredBy.get(file);
  if (required === undefined) throw new Error(`${file}: loaded before its requires were recorded`);
  const modules = required.filter((r): r is [string, Record<string, unknown>] => (typeof r[1] === 'object' && r[1] !== null) || typeof r[1] === 'function');
  const map = new Map<string, { from: string; prop: string }>();
  for (const name of Object.keys(exports)) {
    if (Object.getOwnPropertyDescriptor(exports, name)?.get === undefined) continue;
    const value = exports[name];
    const same = modules.find(([, m]) => name in m && m[name] === value);
    if (same) {
      map.set(name, { from: same[0], prop: name });
      continue;
    }
    if ((typeof value !== 'object' || value === null) && typeof value !== 'function') continue;
    for (const [from, m] of modules) {
      const prop = Object.keys(m).find((p) => m[p] === value);
      if (prop !== undefined) {
        map.set(name, { from, prop });
        break;
      }
    }
  }
  return map;
}

/**
 * The esbuild plugin of {@link DEFERRED}: a `require` of one of these files from the bundled
 * code gets a {@link standIn} (export names read here, at build time, by loading the module).
 * A getter of a re-export ({@link reExportsOf}) runs only the module the export comes from
 * (Nest's `new ReplaySubject()` then loads the 25 rxjs modules it needs, not 226); any other
 * runs the whole module. Every importer shares the one bundled copy of each module, and
 * TypeScript's `__exportStar` copies the getters themselves, so it stays lazy. The build fails
 * when one of the files does not exist or no bundled code requires it.
 */
function deferredModules(files: string[]): Plugin {
  const deferred = packageFiles(files);
  return {
    name: 'svc-deferred-modules',
    setup(b) {
      const seen = new Set<string>();
      b.onEnd((result) => {
        if (result.errors.length > 0) return;
        const unseen = [...deferred].filter(([file]) => !seen.has(file)).map(([, f]) => f);
        if (unseen.length > 0) return { errors: [{ text: `deferred modules no bundled code requires: ${unseen.join(', ')}` }] };
      });
      // Relative and absolute requires, and bare ones of the packages the files belong to.
      const packages = [...new Set(files.map((f) => packageOf(f)!))];
      const filter = new RegExp(`^(\\.|/|(${anyOf(packages)})(/|$))`);
      b.onResolve({ filter }, (args) => {
        if (args.namespace !== 'file' && args.namespace !== 'svc-deferred') return undefined;
        const file = resolvedFrom(args.path, args.resolveDir);
        if (file === null || !deferred.has(file)) return undefined;
        seen.add(file);
        return args.namespace === 'svc-deferred' ? { path: file } : { path: file, namespace: 'svc-deferred' };
      });
      b.onLoad({ filter: /.*/, namespace: 'svc-deferred' }, (args) => {
        // Nest's modules need the Reflect metadata API when loaded, as in the programs.
        // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only when a deferred module is, as the comment above says
        require('reflect-metadata');
        // eslint-disable-next-line @typescript-eslint/no-require-imports -- the module named by the bundler, at build time
        const real = require(args.path) as Record<string, unknown>;
        return { contents: standIn(real, args.path, reExportsOf(args.path, real)), loader: 'js', resolveDir: dirname(args.path) };
      });
    },
  };
}

/**
 * Package modules loaded with globals replaced by stand-ins that create the real object on first
 * use (libs/ops/src/lazy-globals.ts), as paths under `node_modules`: start-up work they do when
 * loaded that our programs never use. Nest's `Logger` and `ConsoleLogger` modules (always loaded)
 * build an `Intl.DateTimeFormat`, which loads the ICU locale data (about 12 ms; our programs log
 * through pino or not at all). nest-commander's module reads `process.stdin` (for inquirer's
 * prompts, which our commands do not use): Node then creates the stdin stream, and for a file or
 * /dev/null its fs streams, fs/promises and readline modules with it (about 4 ms); the input of
 * its prompt options is then a stand-in that forwards to `process.stdin`.
 * test/cli-startup.e2e-spec.ts checks that the clients build no date formatter and create no
 * stdin stream at start-up, and that, unbundled, these modules still do (else this list is out of date).
 */
const LAZY_GLOBALS: Record<string, LazyGlobal[]> = {
  '@nestjs/common/services/logger.service.js': ['Intl.DateTimeFormat'],
  '@nestjs/common/services/console-logger.service.js': ['Intl.DateTimeFormat'],
  'nest-commander/src/command-runner.module.js': ['process.stdin'],
};

/** The compiled libs/ops/src/lazy-globals.ts, which the modules of {@link lazyGlobals} require. */
const LAZY_GLOBALS_MODULE = require.resolve('../libs/ops/src/lazy-globals');

/**
 * The esbuild plugin of {@link LAZY_GLOBALS}: a `require` of one of these files from the bundled
 * code gets a module of ours that loads the file (bundled as it is) through `loadWithLazyGlobals`
 * and exports what it exports. The build fails when one of the files does not exist.
 */
function lazyGlobals(files: Record<string, LazyGlobal[]>): Plugin {
  const paths = packageFiles(Object.keys(files));
  return {
    name: 'svc-lazy-globals',
    setup(b) {
      const packages = [...new Set(Object.keys(files).map((f) => packageOf(f)!))];
      const filter = new RegExp(`^(\\.|/|(${anyOf(packages)})(/|$))`);
      b.onResolve({ filter }, (args) => {
        if (args.namespace !== 'file' && args.namespace !== 'svc-lazy-globals') return undefined;
        const file = resolvedFrom(args.path, args.resolveDir);
        if (file === null || !paths.has(file)) return undefined;
        return args.namespace === 'svc-lazy-globals' ? { path: file } : { path: file, namespace: 'svc-lazy-globals' };
      });
      b.onLoad({ filter: /.*/, namespace: 'svc-lazy-globals' }, (args) => ({
        contents: [
          `const { loadWithLazyGlobals } = require(${JSON.stringify(LAZY_GLOBALS_MODULE)});`,
          `module.exports = loadWithLazyGlobals(${JSON.stringify(files[paths.get(args.path)!])}, () => require(${JSON.stringify(args.path)}));`,
        ].join('\n'),
        loader: 'js',
        resolveDir: dirname(args.path),
      }));
    },
  };
}

/**
 * Frames up to this size (bytes) are masked and unmasked by bufferutil's own JavaScript
 * fallback, larger ones by its native code ({@link smallFrameMask}).
 */
const NATIVE_MASK_FROM = 4096;

/**
 * The esbuild plugin that stands in for `bufferutil` (ws's native masking, when installed at
 * build time): frames under {@link NATIVE_MASK_FROM} bytes are masked by the package's own
 * JavaScript fallback (`bufferutil/fallback`, bundled), larger ones by the package itself, loaded
 * on the first large frame. Loading it (node-gyp-build's search for the binary, then dlopen)
 * costs about 2 ms, which a command whose frames are all small (the control and FS requests of
 * a CLI command) no longer pays; ws itself masks frames under 48 bytes in JavaScript.
 */
function smallFrameMask(): Plugin {
  return {
    name: 'svc-small-frame-mask',
    setup(b) {
      b.onResolve({ filter: /^bufferutil$/ }, (args) => {
        if (args.namespace === 'svc-mask') return { path: args.path, external: true };
        // Not installed: left to nativeAddons.
        return resolvedFrom('bufferutil', args.resolveDir) === null ? undefined : { path: 'bufferutil', namespace: 'svc-mask' };
      });
      b.onLoad({ filter: /.*/, namespace: 'svc-mask' }, () => ({
        contents: [
          `const small = require('bufferutil/fallback');`,
          `let native;`,
          `const load = () => (native ??= require('bufferutil'));`,
          `exports.mask = (source, mask, output, offset, length) => (length < ${NATIVE_MASK_FROM} ? small : load()).mask(source, mask, output, offset, length);`,
          `exports.unmask = (buffer, mask) => (buffer.length < ${NATIVE_MASK_FROM} ? small : load()).unmask(buffer, mask);`,
        ].join('\n'),
        loader: 'js',
        resolveDir: ROOT,
      }));
    },
  };
}

/**
 * Runs `main.js` of a program once with {@link WRITE_CODE_CACHE_ENV} set; resolves when it has
 * exited (a server: once it listened and was stopped). At most 20 s.
 * @throws Error when it cannot be started, or a server exits before listening or does not listen in time
 */
function warmRun(main: string, run: WarmRun, exportDir: string): Promise<void> {
  const args = run.args.map((a) => a.replace('{export}', exportDir));
  const child = spawn(process.execPath, [main, ...args], {
    cwd: ROOT,
    env: {
      ...process.env,
      [WRITE_CODE_CACHE_ENV]: '1',
      SVC_AUTH_TOKEN: '',
      SVC_URL: '',
      SVC_FS_NODE_AUTH_TOKEN: '',
      SVC_METRICS_PORT: '',
      SVC_LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((res, rej) => {
    let out = '';
    let err = '';
    let listened = false;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      rej(new Error(`${main} ${args.join(' ')}: still running after 20 s`));
    }, 20_000);
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      if (run.untilListening && !listened && /listening on /.test(out)) {
        listened = true;
        child.kill('SIGTERM');
      }
    });
    child.once('error', (e) => {
      clearTimeout(timer);
      rej(e);
    });
    child.once('close', () => {
      clearTimeout(timer);
      if (run.untilListening && !listened) rej(new Error(`${main} ${args.join(' ')}: exited before listening: ${err}`));
      else res();
    });
  });
}

/**
 * Bundles one program and records its code cache.
 * @throws Error when esbuild fails or no code cache was written
 */
async function bundle(p: Program, exportDir: string): Promise<void> {
  const dir = join(ROOT, 'dist', 'apps', p.app, 'src');
  const entry = join(dir, 'program.js');
  const outfile = join(dir, BUNDLE_FILE);
  if (!existsSync(entry)) throw new Error(`${p.app}: ${entry} is missing (run tsc first)`);
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    sourcemap: 'linked',
    // Class and function names stay as written: Nest names providers and modules by them.
    keepNames: true,
    // Packages resolve as Node's own `require` resolves them: without esbuild's default `module`
    // condition, which picks tslib's ES build, whose exports esbuild's interop then copies into a
    // new object for each of the ~60 modules that require tslib (about 3 ms at every start).
    conditions: [],
    plugins: [
      smallFrameMask(),
      deferredModules(DEFERRED),
      nativeAddons(NATIVE),
      ...(p.lazyBuiltins.length > 0 ? [lazyBuiltins(p.lazyBuiltins)] : []),
      lazyPackages(LAZY),
      externals(p.external),
      lazyGlobals(LAZY_GLOBALS),
    ],
    logLevel: 'warning',
  });
  const code = readFileSync(outfile, 'utf8');
  const id = createHash('sha256').update(code).digest('hex').slice(0, BUNDLE_ID_LENGTH);
  writeFileSync(outfile, `${code.replace(/\n?$/, '')}${BUNDLE_ID_MARK}${id}\n`);

  // Each run adds what it compiled to the cache the previous one left.
  for (const run of p.warmRuns) await warmRun(join(dir, 'main.js'), run, exportDir);
  const cache = codeCacheFileOf(outfile, id);
  if (!existsSync(cache)) throw new Error(`${p.app}: no code cache was recorded (${cache})`);
}

async function main(): Promise<void> {
  const only = process.argv.slice(2);
  const unknown = only.filter((a) => !PROGRAMS.some((p) => p.app === a));
  if (unknown.length > 0) throw new Error(`unknown program ${unknown.join(', ')}; known: ${PROGRAMS.map((p) => p.app).join(', ')}`);
  recordRequires();
  const exportDir = mkdtempSync(join(tmpdir(), 'svc-bundle-warm-'));
  try {
    for (const p of PROGRAMS) if (only.length === 0 || only.includes(p.app)) await bundle(p, exportDir);
  } finally {
    rmSync(exportDir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  process.stderr.write(`bundle-clis: ${(e as Error).message}\n`);
  process.exit(1);
});
