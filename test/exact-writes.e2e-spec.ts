/**
 * e2e: nothing written through a real FUSE mount is lost, torn or wrong, checked with real
 * tools on one workspace mounted twice (two `svc-fs-mount mount` processes of one project on two
 * mount points, as two machines would mount it). `/a` is node A's export `work`.
 *
 * One mount:
 * - a file still open for writing is read whole through a second descriptor and by another
 *   process (`cat`, `sha256sum`) before the writer closes it;
 * - `git clone --no-local` of a 3,000-commit repository with a pack of several MiB succeeds,
 *   `git fsck --full` is clean, the log has every commit and the work tree is unchanged;
 * - `tar -xpf` of 2,000 files with varied modes and past mtimes, then `tar -df` reports
 *   nothing, and the node's disk has the archive's mtimes and modes;
 * - a small C program builds with `make -j2`, runs, and a second `make` has nothing to do;
 * - 300 SQLite transactions (rollback journal) from one `sqlite3` process leave a database
 *   whose `PRAGMA integrity_check` is ok and which has all 300 rows;
 * - times set with `futimens` or `utimensat` after writes and before close are the times seen
 *   through the mounts and on the node's disk (to the microsecond).
 * Two mounts at once:
 * - O_APPEND writers on both mounts: every 64-byte record lands exactly once and whole;
 * - O_CREAT|O_EXCL on the same names from both mounts: each name has exactly one winner;
 * - an editor-style save (temp file, fsync, rename over the target) on one mount is read whole
 *   on the other at its next open.
 * A node whose export is full (a 4 MiB tmpfs): a writer through the mount gets ENOSPC at a
 * write, fsync or close, never a silent loss, and a file's earlier content stays whole.
 *
 * Skipped, with the reason printed, where FUSE is unavailable; a case whose tool (python3, git,
 * tar, make, cc, sqlite3) is missing is skipped with the reason printed (.ci/run installs them).
 */
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  utimesSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { BIN, cleanupTmp, killAll, sleep, tmpDir, waitFor } from './support/processes';
import { startWorkspace, Workspace } from './helpers/workspace';
import { fuseUnavailable, killMount, startFsNode } from './helpers/fs-mount';
import { endMounts, has, itWith, ok, python, run, startMount } from './helpers/mount-tools';

const reason = fuseUnavailable();
if (reason) process.stdout.write(`FUSE e2e tests skipped: ${reason}\n`);
const describeFuse = reason ? describe.skip : describe;

/** This suite's name in the messages of skipped cases. */
const SUITE = 'exact-writes';

const sha = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');

/** A fast-import stream of `commits` commits on main; every 10th adds 16 KiB of random bytes. */
function fastImportStream(commits: number): Buffer {
  const parts: Buffer[] = [];
  const text = (s: string) => parts.push(Buffer.from(s));
  const data = (b: Buffer) => {
    text(`data ${b.length}\n`);
    parts.push(b);
    text('\n');
  };
  let mark = 0;
  for (let i = 0; i < commits; i++) {
    const files: Array<[string, number]> = [];
    text(`blob\nmark :${++mark}\n`);
    data(Buffer.from(`note of commit ${i}\n`.repeat(1 + (i % 7))));
    files.push([`notes/n${i % 50}.txt`, mark]);
    if (i % 10 === 0) {
      text(`blob\nmark :${++mark}\n`);
      data(randomBytes(16 * 1024));
      files.push([`bin/r${(i / 10) % 40}.bin`, mark]);
    }
    const when = 1_500_000_000 + i * 60;
    text(`commit refs/heads/main\nmark :${++mark}\nauthor T <t@example.com> ${when} +0000\ncommitter T <t@example.com> ${when} +0000\n`);
    data(Buffer.from(`change ${i}\n`));
    for (const [path, m] of files) text(`M 100644 :${m} ${path}\n`);
    text('\n');
  }
  return Buffer.concat(parts);
}

describeFuse('exact writes through FUSE mounts', () => {
  let ws: Workspace;
  /** `/a` through mount 1 and mount 2. */
  let a1: string;
  let a2: string;

  beforeAll(async () => {
    ws = await startWorkspace();
    const logs = tmpDir('mount-logs-');
    const [m1, m2] = await Promise.all([startMount(ws, logs, 'mount1'), startMount(ws, logs, 'mount2')]);
    a1 = join(m1.dir, 'a');
    a2 = join(m2.dir, 'a');
  }, 60_000);

  afterAll(() => endMounts(ws));

  itWith(
    SUITE,
    ['python3', 'cat', 'sha256sum'],
    'reads every written byte through another descriptor and another process before the writer closes',
    async () => {
      const script = `
import hashlib, json, os, random, subprocess, sys
path = sys.argv[1]
data = os.urandom(3 * 1024 * 1024)
rnd = random.Random(7)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
off = 0
while off < len(data):
    off += os.write(fd, data[off:off + rnd.randint(1, 200_000)])
r = os.open(path, os.O_RDONLY)
chunks = []
while True:
    b = os.read(r, 1 << 20)
    if not b:
        break
    chunks.append(b)
os.close(r)
again = b''.join(chunks)
cat = subprocess.run(['cat', path], capture_output=True, timeout=60).stdout
summed = subprocess.run(['sha256sum', path], capture_output=True, text=True, timeout=60).stdout.split(' ')[0]
size = os.stat(path).st_size
os.close(fd)
print(json.dumps({
  'written': {'bytes': len(data), 'sha256': hashlib.sha256(data).hexdigest()},
  'secondDescriptor': {'bytes': len(again), 'sha256': hashlib.sha256(again).hexdigest()},
  'cat': {'bytes': len(cat), 'sha256': hashlib.sha256(cat).hexdigest()},
  'sha256sum': summed,
  'statSize': size,
}))
`;
      const file = join(a1, 'open-read.bin');
      const got = JSON.parse(ok(await python(script, [file]), 'the python writer')) as {
        written: { bytes: number; sha256: string };
        secondDescriptor: { bytes: number; sha256: string };
        cat: { bytes: number; sha256: string };
        sha256sum: string;
        statSize: number;
      };
      expect(got.written.bytes).toBe(3 * 1024 * 1024);
      expect(got).toEqual({
        written: got.written,
        secondDescriptor: got.written,
        cat: got.written,
        sha256sum: got.written.sha256,
        statSize: got.written.bytes,
      });
      // and after the close, on the node's disk
      expect(sha(readFileSync(join(ws.dirs.a, 'open-read.bin')))).toBe(got.written.sha256);
    },
    60_000,
  );

  itWith(
    SUITE,
    ['git'],
    'clones a 3,000-commit repository with git clone --no-local, and git fsck --full is clean',
    async () => {
      const COMMITS = 3000;
      const src = join(tmpDir('git-src-'), 'src.git');
      ok(await run('git', ['init', '-q', '--bare', src]), 'git init');
      ok(await run('git', ['symbolic-ref', 'HEAD', 'refs/heads/main'], { cwd: src }), 'git symbolic-ref');
      ok(await run('git', ['fast-import', '--quiet'], { cwd: src, input: fastImportStream(COMMITS), timeoutMs: 60_000 }), 'git fast-import');
      const head = ok(await run('git', ['rev-parse', 'HEAD'], { cwd: src }), 'git rev-parse').trim();

      const clone = join(a1, 'clone');
      ok(await run('git', ['clone', '-q', '--no-local', src, clone], { timeoutMs: 110_000 }), 'git clone into the mount');
      // the pack on the node's disk: several MiB (300 blobs of 16 KiB of random bytes)
      const packDir = join(ws.dirs.a, 'clone', '.git', 'objects', 'pack');
      const packBytes = readdirSync(packDir)
        .filter((f) => f.endsWith('.pack'))
        .reduce((n, f) => n + statSync(join(packDir, f)).size, 0);
      expect(packBytes).toBeGreaterThan(4 * 1024 * 1024);

      const fsck = await run('git', ['fsck', '--full', '--no-progress'], { cwd: clone, timeoutMs: 60_000 });
      expect({ code: fsck.code, output: `${fsck.stdout}${fsck.stderr}` }).toEqual({ code: 0, output: '' });
      expect(ok(await run('git', ['rev-parse', 'HEAD'], { cwd: clone }), 'git rev-parse').trim()).toBe(head);
      const log = ok(await run('git', ['log', '--oneline'], { cwd: clone, timeoutMs: 30_000 }), 'git log');
      expect(log.split('\n').filter((l) => l).length).toBe(COMMITS);
      expect(ok(await run('git', ['status', '--porcelain'], { cwd: clone, timeoutMs: 30_000 }), 'git status')).toBe('');
    },
    150_000,
  );

  itWith(
    SUITE,
    ['tar'],
    'extracts 2,000 files with tar -xpf, and tar -df reports no difference',
    async () => {
      const FILES = 2000;
      const MODES = [0o600, 0o644, 0o755, 0o640];
      const base = tmpDir('tar-src-');
      const pool = randomBytes(64 * 1024);
      const files: Array<{ rel: string; mode: number; mtime: number }> = [];
      for (let i = 0; i < FILES; i++) {
        const dir = join('tree', `d${i % 20}`, `e${Math.floor(i / 20) % 5}`);
        const rel = join(dir, `f${i}.dat`);
        mkdirSync(join(base, dir), { recursive: true });
        const size = (i * 7919) % 20_000;
        const off = (i * 131) % (pool.length - size);
        writeFileSync(join(base, rel), pool.subarray(off, off + size));
        const mode = MODES[i % MODES.length];
        chmodSync(join(base, rel), mode);
        // one day apart from 2001 on: different for each file, years back
        const mtime = 1_000_000_000 + i * 86_400 + (i % 60);
        utimesSync(join(base, rel), mtime - 3600, mtime);
        files.push({ rel, mode, mtime });
      }
      const archive = join(tmpDir('tar-'), 'tree.tar');
      ok(await run('tar', ['-cf', archive, '-C', base, 'tree']), 'tar -c');

      const into = join(a1, 'untar');
      mkdirSync(into);
      ok(await run('tar', ['-xpf', archive, '-C', into], { timeoutMs: 100_000 }), 'tar -x into the mount');
      const diff = await run('tar', ['-df', archive, '-C', into], { timeoutMs: 60_000 });
      const lines = `${diff.stdout}${diff.stderr}`.split('\n').filter((l) => l);
      const sample = files.filter((_, i) => i % 97 === 0).map((f) => ({ rel: f.rel, mode: f.mode.toString(8), mtime: f.mtime }));
      const onNode = sample.map((f) => {
        const st = statSync(join(ws.dirs.a, 'untar', f.rel));
        return { rel: f.rel, mode: (st.mode & 0o7777).toString(8), mtime: st.mtimeMs / 1000 };
      });
      expect({ tarDiff: { code: diff.code, lines: lines.length, first: lines.slice(0, 20) }, sampleOnNode: onNode }).toEqual({
        tarDiff: { code: 0, lines: 0, first: [] },
        sampleOnNode: sample,
      });
    },
    150_000,
  );

  itWith(
    SUITE,
    ['make', 'cc'],
    'builds a small C program with make -j2, runs it, and a second make does nothing',
    async () => {
      const dir = join(a1, 'cprog');
      mkdirSync(dir);
      writeFileSync(join(dir, 'util.h'), '#ifndef UTIL_H\n#define UTIL_H\nint sum_to(int n);\nconst char *greeting(void);\n#endif\n');
      writeFileSync(join(dir, 'sum.c'), '#include "util.h"\n\nint sum_to(int n) {\n  int s = 0;\n  for (int i = 1; i <= n; i++) s += i;\n  return s;\n}\n');
      writeFileSync(join(dir, 'greet.c'), '#include "util.h"\n\nconst char *greeting(void) { return "hello from the mount"; }\n');
      writeFileSync(
        join(dir, 'main.c'),
        '#include <stdio.h>\n#include "util.h"\n\nint main(void) {\n  printf("%s\\nsum=%d\\n", greeting(), sum_to(100));\n  return 0;\n}\n',
      );
      writeFileSync(
        join(dir, 'Makefile'),
        [
          'CFLAGS = -O2 -Wall -Werror',
          'OBJS = main.o sum.o greet.o',
          '',
          'all: prog',
          '',
          'prog: $(OBJS)',
          '\t$(CC) $(CFLAGS) -o $@ $(OBJS)',
          '',
          '%.o: %.c util.h',
          '\t$(CC) $(CFLAGS) -c -o $@ $<',
          '',
          '.PHONY: all',
          '',
        ].join('\n'),
      );
      ok(await run('make', ['-j2'], { cwd: dir, timeoutMs: 60_000 }), 'make -j2');
      expect(ok(await run(join(dir, 'prog'), [], { cwd: dir }), 'the built program')).toBe('hello from the mount\nsum=5050\n');
      const again = ok(await run('make', [], { cwd: dir, timeoutMs: 30_000 }), 'the second make');
      expect(again).toMatch(/Nothing to be done|is up to date/);
    },
    90_000,
  );

  itWith(
    SUITE,
    ['sqlite3'],
    'commits 300 SQLite transactions from one sqlite3 process, and the database is intact',
    async () => {
      const ROWS = 300;
      const db = join(a1, 'rows.db');
      const sql = [
        'PRAGMA journal_mode;',
        'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);',
        ...Array.from({ length: ROWS }, (_, i) => `BEGIN; INSERT INTO t(v) VALUES('row ${i} ${'x'.repeat((i * 37) % 500)}'); COMMIT;`),
        '',
      ].join('\n');
      const wrote = await run('sqlite3', ['-batch', '-bail', db], { input: sql, timeoutMs: 90_000 });
      expect({ code: wrote.code, stdout: wrote.stdout, stderr: wrote.stderr }).toEqual({ code: 0, stdout: 'delete\n', stderr: '' });
      const check = 'PRAGMA integrity_check; SELECT count(*), count(DISTINCT v) FROM t;';
      expect(ok(await run('sqlite3', ['-batch', db, check]), 'sqlite3 through the mount')).toBe(`ok\n${ROWS}|${ROWS}\n`);
      expect(ok(await run('sqlite3', ['-batch', join(ws.dirs.a, 'rows.db'), check]), "sqlite3 on the node's disk")).toBe(`ok\n${ROWS}|${ROWS}\n`);
    },
    120_000,
  );

  itWith(
    SUITE,
    ['python3'],
    'keeps the times set with futimens and utimensat after writes and before close',
    async () => {
      const ATIME_NS = 1_400_000_000_123_456_789n;
      const MTIME_NS = 1_500_000_000_987_654_321n;
      const script = `
import hashlib, json, os, sys
path, how, atime, mtime = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = os.urandom(1 << 20)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
off = 0
while off < len(data):
    off += os.write(fd, data[off:off + 150_001])
if how == 'fd':
    os.utime(fd, ns=(atime, mtime))
else:
    os.utime(path, ns=(atime, mtime))
os.close(fd)
st = os.stat(path)
print(json.dumps({'atimeUs': st.st_atime_ns // 1000, 'mtimeUs': st.st_mtime_ns // 1000, 'size': st.st_size, 'sha256': hashlib.sha256(data).hexdigest()}))
`;
      const want = { atimeUs: Number(ATIME_NS / 1000n), mtimeUs: Number(MTIME_NS / 1000n), size: 1 << 20 };
      const seen: Record<string, unknown> = {};
      const expected: Record<string, unknown> = {};
      const hashes: Record<string, { written: string; onNode: string }> = {};
      for (const how of ['fd', 'path']) {
        const name = `utime-${how}.bin`;
        const r = JSON.parse(ok(await python(script, [join(a1, name), how, String(ATIME_NS), String(MTIME_NS)]), `the python writer (${how})`)) as {
          atimeUs: number;
          mtimeUs: number;
          size: number;
          sha256: string;
        };
        const times = (p: string) => {
          const st = statSync(p, { bigint: true });
          return { atimeUs: Number(st.atimeNs / 1000n), mtimeUs: Number(st.mtimeNs / 1000n), size: Number(st.size) };
        };
        // the times first: reading the content may move the atime on the node's disk
        seen[how] = { mount1: { atimeUs: r.atimeUs, mtimeUs: r.mtimeUs, size: r.size }, node: times(join(ws.dirs.a, name)), mount2: times(join(a2, name)) };
        expected[how] = { mount1: want, node: want, mount2: want };
        hashes[how] = { written: r.sha256, onNode: sha(readFileSync(join(ws.dirs.a, name))) };
      }
      expect(seen).toEqual(expected);
      for (const h of Object.values(hashes)) expect(h.onNode).toBe(h.written);
    },
    60_000,
  );

  itWith(
    SUITE,
    ['python3'],
    'lands every O_APPEND record of writers on both mounts exactly once and whole',
    async () => {
      const RECORDS = 2000;
      const script = `
import os, sys, time
path, wid, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
time.sleep(max(0.0, start - time.time()))
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for i in range(n):
    rec = (wid + '-' + str(i).zfill(6)).ljust(63, '.') + '\\n'
    w = os.write(fd, rec.encode())
    if w != 64:
        sys.exit('short write of record %d: %d bytes' % (i, w))
os.close(fd)
`;
      const start = String(Date.now() / 1000 + 0.5);
      const [ra, rb] = await Promise.all([
        python(script, [join(a1, 'append.log'), 'A', String(RECORDS), start]),
        python(script, [join(a2, 'append.log'), 'B', String(RECORDS), start]),
      ]);
      ok(ra, 'the writer on mount 1');
      ok(rb, 'the writer on mount 2');

      const record = (w: string, i: number) => `${w}-${String(i).padStart(6, '0')}`.padEnd(63, '.');
      const wanted = new Set<string>();
      for (const w of ['A', 'B']) for (let i = 0; i < RECORDS; i++) wanted.add(record(w, i));
      const onNode = join(ws.dirs.a, 'append.log');
      // the release of the last descriptor reaches the node after close() returns
      await waitFor(() => statSync(onNode).size >= 64 * 2 * RECORDS, 2000).catch(() => undefined);
      const content = readFileSync(onNode, 'latin1');
      const lines = content.split('\n');
      if (lines[lines.length - 1] === '') lines.pop();
      const seen = new Map<string, number>();
      const malformed: string[] = [];
      for (const l of lines) {
        if (wanted.has(l)) seen.set(l, (seen.get(l) ?? 0) + 1);
        else malformed.push(JSON.stringify(l.slice(0, 80)));
      }
      const duplicated = [...seen.values()].filter((n) => n > 1).length;
      const missing = [...wanted].filter((r) => !seen.has(r));
      expect({
        bytes: content.length,
        lines: lines.length,
        malformed: malformed.length,
        malformedSample: malformed.slice(0, 5),
        duplicated,
        missing: missing.length,
        missingSample: missing.slice(0, 5),
      }).toEqual({ bytes: 64 * 2 * RECORDS, lines: 2 * RECORDS, malformed: 0, malformedSample: [], duplicated: 0, missing: 0, missingSample: [] });
    },
    60_000,
  );

  itWith(
    SUITE,
    ['python3'],
    'gives each name exactly one winner when both mounts race O_CREAT|O_EXCL on it',
    async () => {
      const NAMES = 50;
      const script = `
import json, os, sys, time
d, names, start = sys.argv[1], sys.argv[2].split(','), float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))
won, errors = [], []
for n in names:
    try:
        fd = os.open(os.path.join(d, n), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        continue
    except OSError as e:
        errors.append('%s: %s' % (n, e))
        continue
    won.append(n)
    os.close(fd)
print(json.dumps({'won': won, 'errors': errors}))
`;
      const rounds: unknown[] = [];
      const expected: unknown[] = [];
      for (let round = 0; round < 3; round++) {
        const dir = `excl-${round}`;
        mkdirSync(join(a1, dir));
        const names = Array.from({ length: NAMES }, (_, i) => `r${round}-name-${i}`);
        const start = String(Date.now() / 1000 + 0.5);
        const [ra, rb] = await Promise.all([python(script, [join(a1, dir), names.join(','), start]), python(script, [join(a2, dir), names.join(','), start])]);
        const a = JSON.parse(ok(ra, 'the racer on mount 1')) as { won: string[]; errors: string[] };
        const b = JSON.parse(ok(rb, 'the racer on mount 2')) as { won: string[]; errors: string[] };
        const wonA = new Set(a.won);
        const wonB = new Set(b.won);
        rounds.push({
          round,
          winners: a.won.length + b.won.length,
          wonByBoth: names.filter((n) => wonA.has(n) && wonB.has(n)),
          wonByNone: names.filter((n) => !wonA.has(n) && !wonB.has(n)),
          errors: [...a.errors, ...b.errors],
          filesOnNode: readdirSync(join(ws.dirs.a, dir)).length,
        });
        expected.push({ round, winners: NAMES, wonByBoth: [], wonByNone: [], errors: [], filesOnNode: NAMES });
      }
      expect(rounds).toEqual(expected);
    },
    60_000,
  );

  it('reads an editor-style save (temp file, fsync, rename) on one mount whole at the next open on the other', async () => {
    const LENGTHS = [100, 5000, 10, 200_000, 3, 65_536, 1, 70_000, 4097, 0, 131_072, 17, 1_000_000, 64, 8192, 300_000, 2, 40_000, 4096, 123_457];
    const target = 'edited.txt';
    writeFileSync(join(a1, target), 'before the first save\n');
    expect(readFileSync(join(a2, target), 'utf8')).toBe('before the first save\n');
    const wrong: unknown[] = [];
    let last = Buffer.alloc(0);
    const t0 = Date.now();
    LENGTHS.forEach((length, i) => {
      const header = Buffer.from(`save ${i}, ${length} bytes\n`);
      const content = Buffer.concat([header, randomBytes(length)]);
      const tmp = join(a1, `.${target}.swp`);
      const fd = openSync(tmp, 'w', 0o644);
      try {
        for (let off = 0; off < content.length;) off += writeSync(fd, content, off, Math.min(64 * 1024, content.length - off));
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, join(a1, target));
      const got = readFileSync(join(a2, target));
      if (!got.equals(content)) {
        wrong.push({
          save: i,
          msAfterFirstSave: Date.now() - t0,
          wantBytes: content.length,
          gotBytes: got.length,
          gotStart: got.subarray(0, 32).toString('latin1').split('\n')[0],
        });
      }
      last = content;
    });
    // and once every cache has expired: tells a stale open from a save that never arrived
    await sleep(2500);
    const lastSeenLater = readFileSync(join(a2, target)).equals(last);
    expect({ wrong, lastSeenLater }).toEqual({ wrong: [], lastSeenLater: true });
  }, 60_000);
});

/** Why a tmpfs cannot be mounted here (the full-disk case needs one), or null. */
function tmpfsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'mounting a tmpfs needs root';
  return null;
}

describeFuse('write errors through a FUSE mount (a node whose export is full)', () => {
  const noTmpfs = tmpfsUnavailable();
  if (noTmpfs) process.stdout.write(`exact-writes e2e: full-disk case skipped: ${noTmpfs}\n`);
  const itFull = noTmpfs || !has('python3') ? it.skip : it;
  let disk: string;
  let mnt: string;
  let mount: ChildProcess | undefined;
  let log = '';

  beforeAll(async () => {
    if (noTmpfs) return;
    disk = tmpDir('full-disk-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'svc-test-full', disk]);
    const node = await startFsNode([`work=${disk}`]);
    mnt = join(tmpDir('full-mnt-'), 'ws');
    mkdirSync(mnt);
    log = join(tmpDir('full-log-'), 'mount.log');
    const fd = openSync(log, 'a');
    mount = spawn(process.execPath, [BIN.fsMount, '--endpoint', `n=${node.url}#work@/w`, 'mount', mnt], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    await waitFor(() => readFileSync(log, 'utf8').includes(`mounted on ${mnt}`), 20_000);
  }, 60_000);

  afterAll(async () => {
    if (noTmpfs) return;
    killMount(mount, mnt);
    await killAll();
    try {
      execFileSync('umount', ['-l', disk]);
    } catch {
      /* not mounted */
    }
    cleanupTmp();
  });

  itFull(
    'reports ENOSPC to the writer (write, close or fsync), and what was written before stays whole',
    async () => {
      const before = randomBytes(512 * 1024);
      writeFileSync(join(mnt, 'w', 'kept.bin'), before);
      const script = `
import errno, json, os, sys
path, how = sys.argv[1], sys.argv[2]
flags = os.O_WRONLY | (os.O_APPEND if how == 'append' else os.O_CREAT | os.O_TRUNC)
fd = os.open(path, flags, 0o644)
where, written = None, 0
try:
    for i in range(200):
        written += os.write(fd, os.urandom(64 * 1024))
    where = 'none'
    os.fsync(fd)
except OSError as e:
    where = 'write/fsync:%d' % e.errno
try:
    os.close(fd)
except OSError as e:
    if where in (None, 'none'):
        where = 'close:%d' % e.errno
print(json.dumps({'where': where, 'written': written}))
`;
      // A new file larger than the disk, then an append to the file that was there.
      const big = JSON.parse(ok(await python(script, [join(mnt, 'w', 'big.bin'), 'new']), 'the writer of big.bin')) as { where: string };
      const app = JSON.parse(ok(await python(script, [join(mnt, 'w', 'kept.bin'), 'append']), 'the appender to kept.bin')) as { where: string };
      expect({ big: big.where, app: app.where }).toEqual({ big: expect.stringMatching(/:28$/), app: expect.stringMatching(/:28$/) });
      // The content written before the disk filled is whole, through the mount and on the node's disk.
      const onDisk = readFileSync(join(disk, 'kept.bin'));
      const throughMount = readFileSync(join(mnt, 'w', 'kept.bin'));
      expect(onDisk.subarray(0, before.length).equals(before)).toBe(true);
      expect(throughMount.subarray(0, before.length).equals(before)).toBe(true);
    },
    60_000,
  );
});
