/**
 * e2e: the programs' start-up. `npm run build` bundles `svc-control`,
 * `svc-fs-mount` and `svc-fs-node` and records a V8 code cache of each bundle
 * (scripts/bundle-clis.ts, libs/ops/src/bundled-program.ts). Checked here on the built programs:
 * each runs from its bundle with its cache accepted; the bundle behaves as the program it was
 * made of (same output and exit code, usage and connection errors included); a command loads its
 * bundle and next to nothing else (not nest-commander's prompt or plugin packages); `svc-fs-node`
 * answers `--help` and configuration errors without loading Nest; and a program with no cache, a
 * cache V8 refuses, a bundle older than its program, or no bundle at all still runs, the same.
 */
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, cleanupTmp, killAll, ROOT, runCli, tmpDir } from './support/processes';

type App = 'svc-control' | 'svc-fs-mount' | 'svc-fs-node';
const APPS: App[] = ['svc-control', 'svc-fs-mount', 'svc-fs-node'];
const main = (app: App, root = ROOT) => join(root, 'dist', 'apps', app, 'src', 'main.js');
const program = (app: App, root = ROOT) => join(root, 'dist', 'apps', app, 'src', 'program.js');

/** The environment of every run: none of the variables the programs read. */
const ENV: NodeJS.ProcessEnv = {
  SVC_AUTH_TOKEN: '',
  SVC_URL: '',
  SVC_FS_AUTH_TOKEN: '',
  SVC_FS_NODE_AUTH_TOKEN: '',
  SVC_STATE_DIR: '/nonexistent',
  SVC_BUNDLE_TRACE: '',
};
const TRACE = { ...ENV, SVC_BUNDLE_TRACE: '1' };

/** Without a server: option parsing, usage errors, and a connection refused (port 1 on loopback). */
const CASES: Record<App, string[][]> = {
  'svc-control': [
    ['--help'],
    ['--no-such-flag', 'ping'],
    ['--url', 'ws://127.0.0.1:1/', '--auth-token', 'x', 'ping'],
    ['--auth-token', 'x', 'project_create', '{nope'],
    [],
  ],
  'svc-fs-mount': [
    ['--help'],
    ['cat'],
    ['nope'],
    ['--endpoint', 'a=ws://127.0.0.1:1/v2/fs#work@/a', 'cat', '/a/x'],
    ['--endpoint', 'bad spec', 'getattr', '/'],
  ],
  'svc-fs-node': [['--help'], ['--export'], ['--export', 'bad name=/tmp'], ['--port', '99999'], ['--no-such-flag']],
};

/** A preload that writes every module file loaded, one a line, to the file in $LOADED_OUT at exit. */
let preload: string;
/**
 * A preload that writes, as JSON to the file in $PROBE_OUT at exit, the stack frame (file and
 * line) that built each `Intl.DateTimeFormat` (`dtf`) and that read `process.stdin` (`stdin`).
 */
let probe: string;

beforeAll(() => {
  const dir = tmpDir('cli-startup-');
  preload = join(dir, 'loaded.js');
  writeFileSync(preload, "process.on('exit', () => require('fs').writeFileSync(process.env.LOADED_OUT, Object.keys(require.cache).join('\\n')));\n");
  probe = join(dir, 'probe.js');
  writeFileSync(
    probe,
    [
      `const seen = { dtf: [], stdin: [] };`,
      `const caller = () => (new Error().stack.split('\\n').slice(1).find((l) => !l.includes(__filename)) || '').trim();`,
      `const Real = Intl.DateTimeFormat;`,
      `const built = (args) => (seen.dtf.push(caller()), Reflect.construct(Real, args));`,
      `Intl.DateTimeFormat = new Proxy(Real, { construct: (_, args) => built(args), apply: (_, __, args) => built(args) });`,
      `const stdin = Object.getOwnPropertyDescriptor(process, 'stdin');`,
      `Object.defineProperty(process, 'stdin', { ...stdin, get() { seen.stdin.push(caller()); return stdin.get.call(this); } });`,
      `process.on('exit', () => require('fs').writeFileSync(process.env.PROBE_OUT, JSON.stringify(seen)));`,
    ].join('\n'),
  );
});
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

/** Runs `node -r preload script args` and returns the module files it loaded. */
async function loadedBy(script: string, args: string[]): Promise<string[]> {
  const out = join(tmpDir('cli-loaded-'), 'loaded.txt');
  const r = await runCli('-r', [preload, script, ...args], { env: { ...ENV, LOADED_OUT: out } });
  expect(r.code).not.toBeNull();
  return readFileSync(out, 'utf8')
    .split('\n')
    .filter((f) => f !== '' && f !== preload);
}

describe('CLI start-up', () => {
  it.each(APPS)('%s runs from its bundle with the code cache the build recorded', async (app) => {
    const r = await runCli(main(app), ['--help'], { env: TRACE });
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`^svc-bundle: \\S+/dist/apps/${app}/src/program\\.bundle\\.js id [0-9a-f]{16} code cache accepted\\n`));
  });

  it.each(APPS)('%s from its bundle prints and exits as its unbundled program does', async (app) => {
    for (const args of CASES[app]) {
      const [bundled, unbundled] = await Promise.all([runCli(main(app), args, { env: ENV }), runCli(program(app), args, { env: ENV })]);
      expect({ args, ...bundled }).toEqual({ args, ...unbundled });
      expect(bundled.stdout.length + bundled.stderr.length).toBeGreaterThan(0);
    }
  });

  it("the data path's GC setting turns incremental marking off, and is left out while a code cache is recorded", async () => {
    // A heap that keeps mark-compacting (live arrays and 1 MiB buffers outside the heap): with
    // incremental marking each mark-compact reports its incremental steps.
    const script = join(tmpDir('data-path-gc-'), 'gc.js');
    writeFileSync(
      script,
      [
        `const gc = require(${JSON.stringify(join(ROOT, 'dist/libs/ops/src/data-path-gc.js'))});`,
        `if (process.argv[2] === 'recording') globalThis[gc.RECORDING_CODE_CACHE] = true;`,
        `if (process.argv[2] !== 'default') gc.useDataPathGc();`,
        `const keep = [];`,
        `for (let i = 0; i < 1500; i++) { keep.push({ a: new Array(2000).fill(i), b: Buffer.allocUnsafe(1 << 20) }); if (keep.length > 40) keep.shift(); }`,
      ].join('\n'),
    );
    const gcLines = async (mode: string) => {
      const r = await runCli('--trace-gc', [script, mode], { env: ENV });
      expect(r.code).toBe(0);
      return { markCompacts: r.stdout.split('Mark-Compact').length - 1, incremental: r.stdout.split('steps since start of marking').length - 1 };
    };
    const [defaults, dataPath, recording] = await Promise.all([gcLines('default'), gcLines('data-path'), gcLines('recording')]);
    expect(defaults.incremental).toBeGreaterThan(0);
    expect(dataPath.markCompacts).toBeGreaterThan(0);
    expect(dataPath.incremental).toBe(0);
    expect(recording.incremental).toBeGreaterThan(0);
  });

  it('a command loads its bundle and next to no other module file', async () => {
    const runs: Array<[App, string[]]> = [
      ['svc-control', ['--url', 'ws://127.0.0.1:1/', '--auth-token', 'x', 'ping']],
      ['svc-fs-mount', ['--endpoint', 'a=ws://127.0.0.1:1/v2/fs#work@/a', 'cat', '/a/x']],
      ['svc-fs-node', ['--help']],
    ];
    for (const [app, args] of runs) {
      const files = await loadedBy(main(app), args);
      // main.js, the loader, the V8 settings, and the native WebSocket helper (bufferutil) with its loader.
      expect({
        app,
        files: files.filter((f) => !/[\\/]dist[\\/](apps|libs)[\\/]/.test(f) && !/node_modules[\\/](bufferutil|node-gyp-build)[\\/]/.test(f)),
      }).toEqual({ app, files: [] });
      expect(files.length).toBeLessThanOrEqual(10);
    }
    // Unbundled, the same svc-control command loads hundreds of files (what the bundle saves).
    const unbundled = await loadedBy(program('svc-control'), ['--url', 'ws://127.0.0.1:1/', '--auth-token', 'x', 'ping']);
    expect(unbundled.length).toBeGreaterThan(300);
    // nest-commander's prompt package among them (bundled, it is not loaded at all: above).
    expect(unbundled.some((f) => /node_modules[\\/]inquirer[\\/]/.test(f))).toBe(true);
  });

  it('a client builds no Intl.DateTimeFormat and creates no process.stdin while it runs a command; unbundled, Nest and nest-commander do both when loaded', async () => {
    // What the bundles load through libs/ops/src/lazy-globals.ts (LAZY_GLOBALS in
    // scripts/bundle-clis.ts). The unbundled runs show that the packages still do this work
    // where the list says: when they no longer do, the list is out of date.
    const probed = async (script: string, args: string[]) => {
      const out = join(tmpDir('cli-probe-'), 'probe.json');
      const r = await runCli('-r', [probe, script, ...args], { env: { ...ENV, PROBE_OUT: out } });
      expect(r.code).not.toBeNull();
      return JSON.parse(readFileSync(out, 'utf8')) as { dtf: string[]; stdin: string[] };
    };
    const runs: Array<[App, string[]]> = [
      ['svc-control', ['--help']],
      ['svc-control', ['--url', 'ws://127.0.0.1:1/', '--auth-token', 'x', 'ping']],
      ['svc-fs-mount', ['--help']],
      ['svc-fs-mount', ['--endpoint', 'a=ws://127.0.0.1:1/v2/fs#work@/a', 'cat', '/a/x']],
    ];
    for (const [app, args] of runs) expect({ app, args, ...(await probed(main(app), args)) }).toEqual({ app, args, dtf: [], stdin: [] });
    const unbundled = await probed(program('svc-control'), ['--help']);
    expect(unbundled.dtf).toEqual([
      expect.stringMatching(/node_modules[\\/]@nestjs[\\/]common[\\/]services[\\/]console-logger\.service\.js:/),
      expect.stringMatching(/node_modules[\\/]@nestjs[\\/]common[\\/]services[\\/]logger\.service\.js:/),
    ]);
    expect(unbundled.stdin).toEqual([expect.stringMatching(/node_modules[\\/]nest-commander[\\/]src[\\/]command-runner\.module\.js:/)]);
  });

  it('svc-fs-node answers --help and configuration errors without loading Nest, its validation or the FS server', async () => {
    for (const args of [['--help'], ['--export', 'bad name=/tmp']]) {
      const files = await loadedBy(program('svc-fs-node'), args);
      expect(files.filter((f) => /node_modules[\\/](@nestjs|class-validator|pino|prom-client)[\\/]|libs[\\/]fs[\\/]/.test(f))).toEqual([]);
    }
  });

  it('runs the same without a code cache, with a cache V8 refuses, with a stale bundle and without a bundle', async () => {
    // A copy of the built svc-control and the libraries, with the project's node_modules.
    const root = tmpDir('cli-copy-');
    const app = join(root, 'dist', 'apps', 'svc-control');
    mkdirSync(join(root, 'dist', 'apps'), { recursive: true });
    cpSync(join(ROOT, 'dist', 'apps', 'svc-control'), app, { recursive: true, preserveTimestamps: true });
    cpSync(join(ROOT, 'dist', 'libs'), join(root, 'dist', 'libs'), { recursive: true, preserveTimestamps: true });
    symlinkSync(join(ROOT, 'node_modules'), join(root, 'node_modules'));
    const src = join(app, 'src');
    const [cacheName] = readdirSync(src).filter((f) => f.endsWith('.v8cache'));
    expect(cacheName).toMatch(/^program\.bundle\.[0-9a-f]{16}\.v8cache$/);
    const reference = await runCli(BIN.control, ['--help'], { env: ENV });
    const run = () => runCli(main('svc-control', root), ['--help'], { env: TRACE });

    let r = await run();
    expect(r.stderr).toContain('code cache accepted');
    expect(r.stdout).toBe(reference.stdout);

    unlinkSync(join(src, cacheName));
    r = await run();
    expect(r.stderr).toContain('code cache none');
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: reference.stdout });

    writeFileSync(join(src, cacheName), Buffer.alloc(4096, 7));
    r = await run();
    expect(r.stderr).toContain('code cache rejected');
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: reference.stdout });

    // tsc wrote program.js after the bundling step: the bundle is stale, the program runs unbundled.
    const later = new Date(Date.now() + 60_000);
    utimesSync(join(src, 'program.js'), later, later);
    r = await run();
    expect(r.stderr).toMatch(/^svc-bundle: \S+program\.bundle\.js is older than \S+program\.js; running \S+program\.js\n/);
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: reference.stdout });

    rmSync(join(src, 'program.bundle.js'));
    r = await run();
    expect(r.stderr).toMatch(/^svc-bundle: no \S+program\.bundle\.js; running \S+program\.js\n/);
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: reference.stdout });
  });
});
