/**
 * e2e: the POSIX operations of the `posix` extension through real FUSE mounts, on one workspace
 * mounted twice (two `svc-fs-mount mount` processes, as two machines; the second with
 * `--allow-other`); `/a` is node A's export `work`, and the node runs as this test's user
 * (root in CI, so it makes objects the caller's):
 * - extended attributes set through mount 1 are read, listed and removed through mount 2, and
 *   are on the node's disk;
 * - a hard link made through mount 1 shows nlink 2 and one inode number through mount 2, a
 *   write or chmod through one name is seen through the other, and nlink is 1 again once a
 *   name is removed, the other keeping the inode number;
 * - a FIFO made through the mount is a FIFO on the node's disk that passes data between two
 *   processes on the node's machine; a UNIX socket bound in the mount is a socket there;
 * - renameat2 RENAME_NOREPLACE onto an existing name is EEXIST and changes nothing, and
 *   RENAME_EXCHANGE swaps two files for the other mount too;
 * - a file unlinked while open stays readable, writable and truncatable through its
 *   descriptor, fstat gives its size as it changes and nlink 0, and ftruncate(2) goes by the
 *   descriptor's write access, not the file's mode;
 * - fallocate(1) through mount 1 (allocate, punch a hole, zero a range, keep the size) is seen
 *   through mount 2, and a mode the node does not take is EOPNOTSUPP;
 * - identities (only when the test runs as root): a file, directory, symlink and FIFO made
 *   through the mount by uid 65534 belong to 65534 on the node's disk; that user cannot write a
 *   root-owned 0644 file (EACCES, as on a local disk) and can write its own; a chown made
 *   through the mount by root is on the node's disk.
 *
 * Skipped, with the reason printed, where FUSE is unavailable or python3 is missing.
 */
import { chmodSync, lstatSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpDir } from './support/processes';
import { startWorkspace, Workspace } from './helpers/workspace';
import { fuseUnavailable } from './helpers/fs-mount';
import { endMounts, itWith, ok, python, run, startMount } from './helpers/mount-tools';

const reason = fuseUnavailable();
if (reason) process.stdout.write(`FUSE e2e tests skipped: ${reason}\n`);
const describeFuse = reason ? describe.skip : describe;

const SUITE = 'posix-ops';
/** The unprivileged user of the identity checks. */
const NOBODY = 65534;

describeFuse('POSIX operations through FUSE mounts', () => {
  let ws: Workspace;
  /** `/a` through mount 1 and mount 2. */
  let a1: string;
  let a2: string;

  beforeAll(async () => {
    ws = await startWorkspace();
    const logs = tmpDir('mount-logs-');
    const [m1, m2] = await Promise.all([startMount(ws, logs, 'mount1'), startMount(ws, logs, 'mount2', ['--allow-other'])]);
    a1 = join(m1.dir, 'a');
    a2 = join(m2.dir, 'a');
  }, 60_000);

  afterAll(() => endMounts(ws));

  itWith(
    SUITE,
    ['python3'],
    'sets extended attributes through one mount and reads, lists and removes them through the other',
    async () => {
      writeFileSync(join(ws.dirs.a, 'x.txt'), 'x');
      const script = `
import errno, json, os, sys
one, two, disk = sys.argv[1:4]
try:
    os.setxattr(one, 'user.color', b'blue')
except OSError as e:
    if e.errno == errno.ENOTSUP:
        print(json.dumps({'skip': 'no user xattrs on the node filesystem'})); sys.exit(0)
    raise
out = {'two': os.getxattr(two, 'user.color').decode(), 'list': os.listxattr(two), 'disk': os.getxattr(disk, 'user.color').decode()}
try:
    os.setxattr(two, 'user.color', b'red', os.XATTR_CREATE)
    out['create'] = 'ok'
except OSError as e:
    out['create'] = errno.errorcode[e.errno]
os.removexattr(two, 'user.color')
try:
    os.getxattr(one, 'user.color')
    out['after'] = 'present'
except OSError as e:
    out['after'] = errno.errorcode[e.errno]
print(json.dumps(out))
`;
      const out = ok(await python(script, [join(a1, 'x.txt'), join(a2, 'x.txt'), join(ws.dirs.a, 'x.txt')]), 'xattr script');
      const got = JSON.parse(out) as { skip?: string } & Record<string, unknown>;
      if (typeof got.skip === 'string') {
        process.stdout.write(`posix-ops e2e: xattr case skipped: ${got.skip}\n`);
        return;
      }
      expect(got).toEqual({ two: 'blue', list: ['user.color'], disk: 'blue', create: 'EEXIST', after: 'ENODATA' });
    },
    30_000,
  );

  itWith(
    SUITE,
    ['python3'],
    'makes a hard link through one mount that the other sees with nlink 2, sharing its content',
    async () => {
      const script = `
import json, os, sys, time
one, two = sys.argv[1:3]
with open(os.path.join(one, 'orig.txt'), 'w') as f: f.write('first')
os.link(os.path.join(one, 'orig.txt'), os.path.join(one, 'alias.txt'))
st = [os.stat(os.path.join(two, n)) for n in ('orig.txt', 'alias.txt')]
with open(os.path.join(two, 'alias.txt'), 'w') as f: f.write('second')
os.chmod(os.path.join(one, 'orig.txt'), 0o600)
mode = oct(os.stat(os.path.join(two, 'alias.txt')).st_mode & 0o777)
os.unlink(os.path.join(two, 'orig.txt'))
kept = [os.stat(os.path.join(d, 'alias.txt')).st_ino == st[0].st_ino for d in (one, two)]
# The writer's own stat right after link and unlink sees the new count (each name is its own kernel inode).
counts = []
for i in range(20):
    f, g = os.path.join(one, 'c%d' % i), os.path.join(one, 'c%d-link' % i)
    open(f, 'w').close()
    before = os.lstat(f).st_nlink
    os.link(f, g)
    linked = os.lstat(f).st_nlink
    os.unlink(g)
    counts.append([before, linked, os.lstat(f).st_nlink])
    os.unlink(f)
print(json.dumps({'counts': sorted(set(map(tuple, counts))), 'nlink': [s.st_nlink for s in st], 'sameIno': st[0].st_ino == st[1].st_ino, 'read': open(os.path.join(one, 'orig.txt') if os.path.exists(os.path.join(one, 'orig.txt')) else os.path.join(one, 'alias.txt')).read(), 'mode': mode, 'after': os.stat(os.path.join(one, 'alias.txt')).st_nlink, 'kept': kept}))
`;
      const got = JSON.parse(ok(await python(script, [a1, a2]), 'link script')) as Record<string, unknown>;
      // One file: one inode number through both names, a chmod through one name seen through
      // the other, and nlink back to 1 once a name is gone, the inode number staying the file's.
      expect(got).toEqual({ counts: [[1, 2, 1]], nlink: [2, 2], sameIno: true, read: 'second', mode: '0o600', after: 1, kept: [true, true] });
      expect(statSync(join(ws.dirs.a, 'alias.txt')).nlink).toBe(1);
    },
    30_000,
  );

  itWith(
    SUITE,
    ['python3'],
    "makes a FIFO that passes data between two processes on the node's machine, and binds a UNIX socket",
    async () => {
      const script = `
import os, socket, stat, sys, threading
mount, disk = sys.argv[1:3]
os.mkfifo(os.path.join(mount, 'pipe'), 0o640)
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(mount, 'sock'))
s.close()
assert stat.S_ISFIFO(os.lstat(os.path.join(disk, 'pipe')).st_mode)
assert stat.S_ISSOCK(os.lstat(os.path.join(disk, 'sock')).st_mode)
got = []
t = threading.Thread(target=lambda: got.append(open(os.path.join(disk, 'pipe'), 'rb').read()))
t.start()
with open(os.path.join(disk, 'pipe'), 'wb') as w: w.write(b'through the fifo')
t.join(10)
print(got[0].decode(), oct(os.lstat(os.path.join(disk, 'pipe')).st_mode & 0o777))
`;
      expect(ok(await python(script, [a1, ws.dirs.a]), 'fifo script').trim()).toBe('through the fifo 0o640');
    },
    30_000,
  );

  itWith(
    SUITE,
    ['python3'],
    'renames with RENAME_NOREPLACE (EEXIST, nothing changed) and RENAME_EXCHANGE (seen through the other mount)',
    async () => {
      const script = `
import ctypes, errno, json, os, sys
one, two = sys.argv[1:3]
libc = ctypes.CDLL(None, use_errno=True)
for n, text in (('left', 'L'), ('right', 'R')):
    with open(os.path.join(one, n), 'w') as f: f.write(text)
l, r = os.path.join(one, 'left').encode(), os.path.join(one, 'right').encode()
out = {}
out['noreplace'] = errno.errorcode.get(ctypes.get_errno(), 'ok') if libc.renameat2(-100, l, -100, r, 1) != 0 else 'ok'
out['before'] = [open(os.path.join(two, n)).read() for n in ('left', 'right')]
out['exchange'] = 'ok' if libc.renameat2(-100, l, -100, r, 2) == 0 else errno.errorcode[ctypes.get_errno()]
out['after'] = [open(os.path.join(two, n)).read() for n in ('left', 'right')]
print(json.dumps(out))
`;
      const got = JSON.parse(ok(await python(script, [a1, a2]), 'rename script')) as Record<string, unknown>;
      expect(got).toEqual({ noreplace: 'EEXIST', before: ['L', 'R'], exchange: 'ok', after: ['R', 'L'] });
      expect(readFileSync(join(ws.dirs.a, 'left'), 'utf8')).toBe('R');
    },
    30_000,
  );

  itWith(
    SUITE,
    ['python3'],
    'keeps an unlinked open file readable, writable and truncatable through its descriptor, with fstat telling its size and nlink 0',
    async () => {
      const script = `
import json, os, sys
p = sys.argv[1]
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b'Hello, World!')
os.unlink(p)
out = {'read': os.pread(fd, 100, 0).decode(), 'size': os.fstat(fd).st_size, 'nlink': os.fstat(fd).st_nlink, 'exists': os.path.exists(p)}
os.write(fd, b' and more')
out['after'] = [os.fstat(fd).st_size, os.pread(fd, 100, 0).decode()]
os.ftruncate(fd, 5)
out['truncated'] = [os.fstat(fd).st_size, os.pread(fd, 100, 0).decode()]
os.close(fd)
# ftruncate(2) goes by the descriptor's write access, not by the file's mode now.
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0)
os.write(fd, b'abcdef')
os.ftruncate(fd, 2)
out['mode0'] = [os.fstat(fd).st_size, os.pread(fd, 100, 0).decode()]
os.close(fd)
os.unlink(p)
print(json.dumps(out))
`;
      const got = JSON.parse(ok(await python(script, [join(a1, 'tmpfile')]), 'unlinked file script')) as Record<string, unknown>;
      expect(got).toEqual({
        read: 'Hello, World!',
        size: 13,
        nlink: 0,
        exists: false,
        after: [22, 'Hello, World! and more'],
        truncated: [5, 'Hello'],
        mode0: [2, 'ab'],
      });
    },
    30_000,
  );

  itWith(
    SUITE,
    ['fallocate', 'python3'],
    'allocates, punches holes and zeroes ranges through one mount (fallocate) as the other mount and the node disk see it',
    async () => {
      const f1 = join(a1, 'alloc.bin');
      writeFileSync(f1, Buffer.alloc(12_288, 'x'));
      ok(await run('fallocate', ['-l', String(1 << 20), join(a1, 'grown.bin')]), 'fallocate -l');
      ok(await run('fallocate', ['-p', '-o', '0', '-l', '4096', f1]), 'fallocate --punch-hole');
      ok(await run('fallocate', ['-z', '-o', '8192', '-l', '100', f1]), 'fallocate --zero-range');
      ok(await run('fallocate', ['-n', '-o', '12288', '-l', '65536', f1]), 'fallocate --keep-size');
      const collapse = await run('fallocate', ['-c', '-o', '0', '-l', '4096', f1]);
      expect(collapse.code).not.toBe(0);
      expect(collapse.stderr).toMatch(/not supported/i);
      const want = Buffer.alloc(12_288, 'x');
      want.fill(0, 0, 4096);
      want.fill(0, 8192, 8292);
      for (const dir of [a1, a2, ws.dirs.a]) {
        expect(statSync(join(dir, 'grown.bin')).size).toBe(1 << 20);
        expect(readFileSync(join(dir, 'alloc.bin')).equals(want)).toBe(true);
      }
      // KEEP_SIZE allocated blocks past the end without growing the file.
      expect(statSync(join(ws.dirs.a, 'alloc.bin')).blocks * 512).toBeGreaterThan(12_288);
    },
    30_000,
  );

  const root = process.getuid?.() === 0;
  (root ? itWith : (_s: string, _t: string[], name: string) => it.skip(name, () => undefined))(
    SUITE,
    ['python3'],
    'makes objects owned by the calling user and gives another user what the permission bits give',
    async () => {
      // The mount point's temporary parent must let the other user through.
      chmodSync(join(a2, '..', '..'), 0o755);
      writeFileSync(join(ws.dirs.a, 'roots.txt'), 'root only');
      chmodSync(join(ws.dirs.a, 'roots.txt'), 0o644);
      ok(await python(`import os, sys; os.mkdir(sys.argv[1], 0o777); os.chmod(sys.argv[1], 0o777)`, [join(a2, 'shared')]), 'mkdir');
      const script = `
import errno, json, os, sys
base, target = sys.argv[1:3]
os.setgroups([]); os.setgid(${NOBODY}); os.setuid(${NOBODY})
with open(os.path.join(base, 'mine.txt'), 'w') as f: f.write('mine')
os.mkdir(os.path.join(base, 'mydir'), 0o750)
os.symlink('mine.txt', os.path.join(base, 'mylink'))
os.mkfifo(os.path.join(base, 'myfifo'), 0o600)
out = {}
try:
    open(target, 'a').write('x')
    out['other'] = 'written'
except OSError as e:
    out['other'] = errno.errorcode[e.errno]
with open(os.path.join(base, 'mine.txt'), 'a') as f: f.write(' and more')
out['own'] = open(os.path.join(base, 'mine.txt')).read()
print(json.dumps(out))
`;
      const got = JSON.parse(ok(await python(script, [join(a2, 'shared'), join(a2, 'roots.txt')]), 'identity script')) as Record<string, unknown>;
      expect(got).toEqual({ other: 'EACCES', own: 'mine and more' });
      for (const n of ['mine.txt', 'mydir', 'mylink', 'myfifo']) {
        const st = lstatSync(join(ws.dirs.a, 'shared', n));
        expect({ n, uid: st.uid, gid: st.gid }).toEqual({ n, uid: NOBODY, gid: NOBODY });
      }
      expect(statSync(join(ws.dirs.a, 'shared', 'mydir')).mode & 0o7777).toBe(0o750);
      expect(readFileSync(join(ws.dirs.a, 'roots.txt'), 'utf8')).toBe('root only');
      // root chowns through the mount.
      ok(await python(`import os, sys; os.chown(sys.argv[1], ${NOBODY}, ${NOBODY})`, [join(a1, 'roots.txt')]), 'chown');
      expect(statSync(join(ws.dirs.a, 'roots.txt')).uid).toBe(NOBODY);
    },
    30_000,
  );
});
