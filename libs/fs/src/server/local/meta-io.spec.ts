/**
 * Unit tests of MetaIo: metadata calls run in place while quick, on the thread pool after a
 * slow one, always on the pool in `pool` mode, and fail with Node's errors either way.
 */
import { constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IN_PLACE_WRITE_MAX, MetaIo, SLOW_CALL_MS, SLOW_CALLS } from './meta-io';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'svc-meta-io-'));
  writeFileSync(join(dir, 'f'), 'x');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Keeps this thread busy for `ms`. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* a slow system call, as the event loop sees it */
  }
}

describe('MetaIo', () => {
  it('runs calls in place until several are slow within the window, then on the pool', async () => {
    const io = new MetaIo('auto');
    const where: string[] = [];
    const call = (ms: number) =>
      io.run(
        () => {
          busy(ms);
          where.push('in place');
          return 1;
        },
        async () => {
          where.push('pool');
          return 2;
        },
      );
    expect(await call(0)).toBe(1);
    expect(io.inPlace).toBe(true);
    // one slow call alone (the process was not running, say) changes nothing
    for (let i = 1; i < SLOW_CALLS; i++) {
      expect(await call(SLOW_CALL_MS + 10)).toBe(1);
      expect(io.inPlace).toBe(true);
    }
    expect(await call(SLOW_CALL_MS + 10)).toBe(1);
    expect(io.inPlace).toBe(false);
    expect(await call(0)).toBe(2);
    expect(where).toEqual(['in place', ...Array<string>(SLOW_CALLS).fill('in place'), 'pool']);
  });

  it('never runs in place in pool mode', async () => {
    const io = new MetaIo('pool');
    expect(io.inPlace).toBe(false);
    expect(
      await io.run(
        () => 'in place',
        async () => 'pool',
      ),
    ).toBe('pool');
  });

  it.each(['auto', 'pool'] as const)('answers and fails as fs/promises does (%s)', async (mode) => {
    const io = new MetaIo(mode);
    expect((await io.lstat(join(dir, 'f'))).size).toBe(1n);
    await expect(io.lstat(join(dir, 'missing'))).rejects.toMatchObject({ code: 'ENOENT', syscall: 'lstat' });
    await expect(io.mkdir(join(dir, 'f'), 0o755)).rejects.toMatchObject({ code: 'EEXIST' });
    await io.mkdir(join(dir, `d-${mode}`), 0o700);
    expect(Number((await io.stat(join(dir, `d-${mode}`))).mode) & 0o777).toBe(0o700);
    await io.rename(join(dir, `d-${mode}`), join(dir, `e-${mode}`));
    await io.rmdir(join(dir, `e-${mode}`));
    await expect(io.rmdir(join(dir, `e-${mode}`))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it.each(['auto', 'pool'] as const)('creates, writes and closes files as fs does, and fails as it does (%s)', async (mode) => {
    const io = new MetaIo(mode);
    const path = join(dir, `new-${mode}`);
    const fd = await io.createFile(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL, 0o600);
    await expect(io.createFile(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL, 0o600)).rejects.toMatchObject({ code: 'EEXIST' });
    const big = Buffer.alloc(IN_PLACE_WRITE_MAX + 1, 7);
    expect(await io.write(fd, Buffer.from('xhello'), 1, 5, 0)).toBe(5);
    expect(await io.write(fd, big, 0, big.length, 5)).toBe(big.length);
    await io.close(fd);
    const back = readFileSync(path);
    expect({ head: back.subarray(0, 5).toString(), size: back.length, tail: back[back.length - 1] }).toEqual({ head: 'hello', size: 5 + big.length, tail: 7 });
  });
});
