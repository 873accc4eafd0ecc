/**
 * e2e: the terminal service (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)") through `svc-fs-mount` in
 * workspace mode: write a request to control/invoke.json, then cat the result; the timeout is
 * enforced; an invalid request is EINVAL and runs nothing.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, runCli } from './support/processes';
import { useWorkspace } from './helpers/workspace';

const ws = useWorkspace({ terminalIds: ['t1'] });

const mountCli = (args: string[]) => runCli(BIN.fsMount, [...ws.mountArgs, ...args], { timeoutMs: 60_000 });
const invoke = '/term/t1/control/invoke.json';

describe('terminal service through svc-fs-mount', () => {
  it('runs a request written to control/invoke.json and returns the result to cat', async () => {
    const w = await mountCli(['write', invoke, '{"argv":["sh","-c","echo hi; exit 3"]}']);
    expect(w).toMatchObject({ code: 0, stderr: '' });
    const r = await mountCli(['cat', invoke]);
    expect(r.code).toBe(0);
    const result = JSON.parse(r.stdout);
    expect(result).toMatchObject({ exit_code: 3, signal: null, stdout: 'hi\n', stderr: '', truncated: false });
    expect(typeof result.duration_ms).toBe('number');
    expect(JSON.parse((await mountCli(['cat', '/term/t1/control/last_result.json'])).stdout)).toEqual(result);
    expect((await mountCli(['cat', '/term/t1/README.md'])).stdout).toContain('control/invoke.json');
  });

  it('runs in the first read-write export without a shell and with only the given environment', async () => {
    await mountCli(['write', invoke, JSON.stringify({ argv: ['sh', '-c', 'pwd; echo "[$SVC_AUTH_TOKEN][$X]"; touch made-by-terminal'], env: { X: 'given' } })]);
    const result = JSON.parse((await mountCli(['cat', invoke])).stdout);
    expect(result.stdout).toBe(`${ws.dirs.a}\n[][given]\n`);
    expect(readFileSync(join(ws.dirs.a, 'made-by-terminal')).length).toBe(0);
  });

  it('enforces timeout_ms', async () => {
    const started = Date.now();
    await mountCli(['write', invoke, '{"argv":["sleep","30"],"timeout_ms":500}']);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(JSON.parse((await mountCli(['cat', invoke])).stdout)).toMatchObject({ exit_code: null, signal: 'SIGKILL', timed_out: true });
  });

  it('refuses a request that is not valid JSON or names no program with EINVAL, running nothing', async () => {
    await mountCli(['write', invoke, '{"argv":["echo","before"]}']);
    const bad = await mountCli(['write', invoke, 'this is not json']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/invalid terminal request: not valid JSON.*\(errno 22\)/);
    const none = await mountCli(['write', invoke, '{"argv":[]}']);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/argv must be a non-empty array.*\(errno 22\)/);
    expect(JSON.parse((await mountCli(['cat', '/term/t1/control/last_result.json'])).stdout).stdout).toBe('before\n');
  });
});
