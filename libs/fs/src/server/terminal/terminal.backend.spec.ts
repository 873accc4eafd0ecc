import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FsError } from '@svc/protocol';
import { parseTerminalRequest, runTerminalRequest, TerminalBackend } from './terminal.backend';

let base: string;
beforeAll(() => {
  base = mkdtempSync(join(tmpdir(), 'term-'));
  mkdirSync(join(base, 'sub'));
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

const errnoOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    return (e as FsError).errno;
  }
  return 0;
};

describe('parseTerminalRequest', () => {
  it.each([
    ['not JSON', '{argv'],
    ['not an object', '["sh"]'],
    ['no argv', '{}'],
    ['empty argv', '{"argv":[]}'],
    ['argv not strings', '{"argv":[1]}'],
    ['empty program', '{"argv":[""]}'],
    ['bad env', '{"argv":["x"],"env":{"A":1}}'],
    ['env name with =', '{"argv":["x"],"env":{"A=B":"1"}}'],
    ['timeout too long', '{"argv":["x"],"timeout_ms":600001}'],
    ['timeout zero', '{"argv":["x"],"timeout_ms":0}'],
  ])('rejects %s with EINVAL', (_n, text) => {
    expect(errnoOf(() => parseTerminalRequest(Buffer.from(text)))).toBe(22);
  });
});

describe('runTerminalRequest', () => {
  it('runs without a shell and reports exit code, output and duration', async () => {
    const r = await runTerminalRequest({ argv: ['sh', '-c', 'echo hi; echo err >&2; exit 3'] }, base);
    expect(r).toMatchObject({ exit_code: 3, signal: null, stdout: 'hi\n', stderr: 'err\n', truncated: false, timed_out: false });
    expect(r.duration_ms).toBeGreaterThanOrEqual(0);
    const literal = await runTerminalRequest({ argv: ['echo', '$HOME;', 'x'] }, base);
    expect(literal.stdout).toBe('$HOME; x\n');
  });

  it('passes only the given environment (plus PATH) and stdin', async () => {
    process.env.SVC_TEST_SECRET = 'must-not-leak';
    const r = await runTerminalRequest({ argv: ['sh', '-c', 'echo "[$SVC_TEST_SECRET][$MINE]"; cat'], env: { MINE: 'yes' }, stdin: 'in' }, base);
    expect(r.stdout).toBe('[][yes]\nin');
  });

  it('confines cwd to the base directory', async () => {
    expect((await runTerminalRequest({ argv: ['pwd'], cwd: 'sub' }, base)).stdout.trim().endsWith('/sub')).toBe(true);
    await expect(runTerminalRequest({ argv: ['pwd'], cwd: '..' }, base)).rejects.toMatchObject({ errno: 22 });
    await expect(runTerminalRequest({ argv: ['pwd'], cwd: '/etc' }, base)).rejects.toMatchObject({ errno: 22 });
  });

  it('kills a program past its timeout and caps output at 1 MiB per stream', async () => {
    const slow = await runTerminalRequest({ argv: ['sleep', '10'], timeout_ms: 200 }, base);
    expect(slow).toMatchObject({ exit_code: null, signal: 'SIGKILL', timed_out: true });
    expect(slow.duration_ms).toBeLessThan(5000);
    const loud = await runTerminalRequest({ argv: ['head', '-c', '3000000', '/dev/zero'] }, base);
    expect(loud.truncated).toBe(true);
    expect(Buffer.byteLength(loud.stdout)).toBeLessThanOrEqual(1024 * 1024 * 3);
    expect(loud.exit_code).toBe(0);
  });

  it('reports a missing program as exit code 127', async () => {
    expect(await runTerminalRequest({ argv: ['no-such-program-xyz'] }, base)).toMatchObject({ exit_code: 127 });
  });
});

describe('TerminalBackend', () => {
  it('runs a written request on close and serves the result from invoke.json and last_result.json', async () => {
    const t = new TerminalBackend('t1', base);
    expect(await t.readdir([])).toEqual(['README.md', 'control']);
    const { file } = await t.open(['control', 'invoke.json'], 2);
    const req = Buffer.from('{"argv":["sh","-c","echo hi; exit 3"]}');
    await file.write(req, 0);
    const buf = Buffer.alloc(4096);
    const n = await file.read(buf, 0);
    expect(JSON.parse(buf.subarray(0, n).toString())).toMatchObject({ exit_code: 3, stdout: 'hi\n' });
    await file.close();
    const { file: last } = await t.open(['control', 'last_result.json'], 0);
    const m = await last.read(buf, 0);
    expect(JSON.parse(buf.subarray(0, m).toString())).toMatchObject({ exit_code: 3 });
    const bad = (await t.open(['control', 'invoke.json'], 1)).file;
    await bad.write(Buffer.from('not json'), 0);
    await expect(bad.close()).rejects.toMatchObject({ errno: 22 });
    await expect(t.open(['README.md'], 1)).rejects.toMatchObject({ errno: 13 });
    await expect(t.mkdir()).rejects.toMatchObject({ errno: 13 });
  });
});
