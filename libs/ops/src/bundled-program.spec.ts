import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUNDLE_FILE, BUNDLE_ID_MARK, bundleIdOf, codeCacheFileOf, runBundled } from './bundled-program';

describe('bundled program start-up', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bundled-program-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('reads the id from the last line of a bundle, and names its code cache by it', () => {
    expect(bundleIdOf(`x = 1;${BUNDLE_ID_MARK}0123456789abcdef\n`)).toBe('0123456789abcdef');
    expect(bundleIdOf('x = 1;\n')).toBeNull();
    expect(bundleIdOf(`x = 1;${BUNDLE_ID_MARK}0123\n`)).toBeNull();
    expect(bundleIdOf(`x = 1;${BUNDLE_ID_MARK}0123456789ABCDEF\n`)).toBeNull();
    expect(codeCacheFileOf('/d/program.bundle.js', '0123456789abcdef')).toBe('/d/program.bundle.0123456789abcdef.v8cache');
  });

  it('runs the bundle as a module of its directory, or the fallback when there is none or it is stale', () => {
    // The bundle runs in node's own context (not jest's): it reports through a file.
    const report = join(dir, 'ran.json');
    const ran = () => (existsSync(report) ? (JSON.parse(readFileSync(report, 'utf8')) as unknown) : undefined);
    let fellBack = 0;
    const fallback = () => fellBack++;

    runBundled(dir, fallback);
    expect(fellBack).toBe(1);

    writeFileSync(join(dir, 'program.js'), '');
    const old = new Date(Date.now() - 60_000);
    utimesSync(join(dir, 'program.js'), old, old);
    writeFileSync(
      join(dir, BUNDLE_FILE),
      `require('fs').writeFileSync(require('path').join(__dirname, 'ran.json'), JSON.stringify({ dirname: __dirname, filename: __filename, main: module.filename }));${BUNDLE_ID_MARK}0123456789abcdef\n`,
    );
    runBundled(dir, fallback);
    expect(fellBack).toBe(1);
    expect(ran()).toEqual({ dirname: dir, filename: join(dir, BUNDLE_FILE), main: join(dir, BUNDLE_FILE) });

    rmSync(report);
    const later = new Date(Date.now() + 60_000);
    utimesSync(join(dir, 'program.js'), later, later);
    runBundled(dir, fallback);
    expect(fellBack).toBe(2);
    expect(ran()).toBeUndefined();
  });

  it('lets an error thrown by the bundle propagate', () => {
    writeFileSync(join(dir, BUNDLE_FILE), `throw new Error('from the bundle');\n`);
    expect(() => runBundled(dir, () => undefined)).toThrow('from the bundle');
  });
});
