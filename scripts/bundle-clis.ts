/**
 * Build step after `tsc` (`npm run build`, issue 11 build item 4): bundles each program's
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
 * Usage: `node dist/scripts/bundle-clis.js [app ...]` (default: every program below).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { build, Plugin } from 'esbuild';
import { BUNDLE_FILE, BUNDLE_ID_LENGTH, BUNDLE_ID_MARK, codeCacheFileOf, WRITE_CODE_CACHE_ENV } from '../libs/ops/src/bundled-program';

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

/** Native addons: always left out of a bundle. */
const NATIVE = ['bufferutil', 'utf-8-validate', 'fuse-native', 'better-sqlite3'];

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
        try {
          require.resolve(args.path, { paths: [args.resolveDir || ROOT] });
          return undefined;
        } catch {
          return { path: args.path, external: true };
        }
      });
    },
  };
}

/**
 * The esbuild plugin of {@link LAZY}: `require('<pkg>')` from the bundled code gets an object
 * with the package's export names (read here, at build time) as getters that load the package
 * then (a real, external `require` from the bundle's directory). `__esModule` is copied as a
 * value so TypeScript's and esbuild's interop helpers see the same shape without loading it.
 */
function lazyPackages(names: string[]): Plugin {
  const filter = new RegExp(`^(${names.map((n) => n.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')).join('|')})$`);
  return {
    name: 'svc-lazy-packages',
    setup(b) {
      b.onResolve({ filter }, (args) => (args.namespace === 'svc-lazy' ? { path: args.path, external: true } : { path: args.path, namespace: 'svc-lazy' }));
      b.onLoad({ filter: /.*/, namespace: 'svc-lazy' }, (args) => {
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const real = require(require.resolve(args.path, { paths: [ROOT] })) as Record<string, unknown>;
        const keys = Object.keys(real).filter((k) => k !== '__esModule');
        const lines = [
          `let real;`,
          `const load = () => (real ??= require(${JSON.stringify(args.path)}));`,
          real.__esModule ? `Object.defineProperty(exports, '__esModule', { value: true });` : '',
          `for (const k of ${JSON.stringify(keys)}) Object.defineProperty(exports, k, { enumerable: true, get: () => load()[k] });`,
        ];
        return { contents: lines.join('\n'), loader: 'js', resolveDir: ROOT };
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
  const filter = new RegExp(`^(node:)?(${names.map((n) => n.replace('/', '\\/')).join('|')})$`);
  return {
    name: 'svc-lazy-builtins',
    setup(b) {
      b.onResolve({ filter }, (args) => (args.namespace === 'svc-lazy-builtin' ? { path: args.path, external: true } : { path: args.path.replace(/^node:/, ''), namespace: 'svc-lazy-builtin' }));
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
 * The esbuild plugin that defers work Nest's `Logger` and `ConsoleLogger` modules do when they
 * are loaded (they always are) to its first use: building an `Intl.DateTimeFormat`, which loads the
 * ICU locale data (about 12 ms). Our programs log through pino or not at all; when a module's
 * text is not as expected (another Nest version) it is bundled unchanged, with a warning.
 */
function lazyNestLoggerClock(): Plugin {
  const eager = /const dateTimeFormatter = new Intl\.DateTimeFormat\(([^;]*?)\);/;
  return {
    name: 'svc-lazy-nest-logger-clock',
    setup(b) {
      b.onLoad({ filter: /@nestjs[\\/]common[\\/]services[\\/](console-)?logger\.service\.js$/ }, (args) => {
        const text = readFileSync(args.path, 'utf8');
        if (!eager.test(text)) return { contents: text, loader: 'js', warnings: [{ text: 'Intl.DateTimeFormat construction not found: bundled unchanged' }] };
        const lazy = 'let dateTimeFormat_;\nconst dateTimeFormatter = { format: (t) => (dateTimeFormat_ ??= new Intl.DateTimeFormat($1)).format(t) };';
        return { contents: text.replace(eager, lazy), loader: 'js' };
      });
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
    env: { ...process.env, [WRITE_CODE_CACHE_ENV]: '1', SVC_AUTH_TOKEN: '', SVC_URL: '', SVC_FS_NODE_AUTH_TOKEN: '', SVC_METRICS_PORT: '', SVC_LOG_LEVEL: 'warn' },
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
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
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
    external: NATIVE,
    plugins: [...(p.lazyBuiltins.length > 0 ? [lazyBuiltins(p.lazyBuiltins)] : []), lazyPackages(LAZY), externals(p.external), lazyNestLoggerClock()],
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
