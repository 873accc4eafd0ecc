/**
 * e2e: the `svc-control` CLI: every exit-code path, payload sources,
 * operator token handling, token discovery from the state directory, and `--watch`.
 */
import { spawn } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, runCli, Running, startProcess, startSvc, tmpDir, waitFor } from './support/processes';

let svc: Running;
const cli = (args: string[], env: NodeJS.ProcessEnv = {}, input?: string) =>
  runCli(BIN.control, ['--url', svc.url, ...args], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN, ...env }, input });

beforeAll(async () => {
  svc = await startSvc();
});
afterAll(async () => {
  await killAll();
  cleanupTmp();
});

describe('svc-control', () => {
  it('prints the reply payload as JSON and exits 0, with or without the control. prefix', async () => {
    const a = await cli(['ping']);
    expect(a).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(a.stdout)).toEqual({});
    const b = await cli(['control.project_create', '{"name":"cli"}']);
    expect(b.code).toBe(0);
    expect(JSON.parse(b.stdout)).toMatchObject({ name: 'cli', token_locked: true });
  });

  it('reads the payload from @file and from standard input', async () => {
    const file = join(tmpDir(), 'payload.json');
    writeFileSync(file, JSON.stringify({ name: 'from-file' }));
    expect(JSON.parse((await cli(['project_create', `@${file}`])).stdout).name).toBe('from-file');
    expect(JSON.parse((await cli(['project_create', '-'], {}, '{"name":"from-stdin"}')).stdout).name).toBe('from-stdin');
  });

  it('prints error: <code>: <message> and exits 1 on control.error', async () => {
    const r = await cli(['project_get', '{"project_id":"proj-nope"}']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('error: project_not_found: project proj-nope not found\n');
    const u = await cli(['unknown_op']);
    expect(u.code).toBe(1);
    expect(u.stderr).toMatch(/^error: unknown_type: /);
  });

  it('exits 2 with a clear message on connection and authentication failures and usage errors', async () => {
    const refused = await runCli(BIN.control, ['--url', 'ws://127.0.0.1:1/', 'ping'], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN } });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('connection refused');
    const unauthorized = await cli(['--auth-token', 'wrong-token', 'ping']);
    expect(unauthorized.code).toBe(2);
    expect(unauthorized.stderr).toContain('authentication failed');
    expect(unauthorized.stderr).toContain('401');
    const badJson = await cli(['project_create', '{nope']);
    expect(badJson.code).toBe(2);
    expect(badJson.stderr).toContain('not valid JSON');
    const notObject = await cli(['project_create', '[1]']);
    expect(notObject.code).toBe(2);
    const noFile = await cli(['project_create', '@/nonexistent/file.json']);
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toContain('cannot read payload file');
    const badFlag = await cli(['--no-such-flag', 'ping']);
    expect(badFlag.code).toBe(2);
    const noToken = await runCli(BIN.control, ['--url', svc.url, 'ping'], { env: { SVC_AUTH_TOKEN: '', SVC_STATE_DIR: tmpDir() } });
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain('no auth token');
  });

  it('adds the operator token to protected operations only, from the flag or the environment', async () => {
    const gated = await startSvc({ env: { SVC_CONTROL_OPERATOR_TOKEN: 'op-token-xyz' } });
    const run = (args: string[], env: NodeJS.ProcessEnv = {}) =>
      runCli(BIN.control, ['--url', gated.url, ...args], { env: { SVC_AUTH_TOKEN: ADMIN_TOKEN, ...env } });
    const without = await run(['project_create', '{"name":"g"}'], { SVC_CONTROL_OPERATOR_TOKEN: '' });
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(/^error: operator_auth_failed: /);
    expect((await run(['--operator-token', 'op-token-xyz', 'project_create', '{"name":"g"}'])).code).toBe(0);
    expect((await run(['project_create', '{"name":"g"}'], { SVC_CONTROL_OPERATOR_TOKEN: 'op-token-xyz' })).code).toBe(0);
    expect((await run(['--operator-token', 'wrong', 'project_create', '{"name":"g"}'])).code).toBe(1);
    // unprotected operations are sent without it (and work either way)
    expect((await run(['--operator-token', 'op-token-xyz', 'node_list'])).code).toBe(0);
  });

  it('finds the admin token in ${SVC_STATE_DIR}/auth_tokens.json', async () => {
    const stateDir = tmpDir();
    const own = await startProcess(BIN.svc, ['--port', '0', '--state-dir', stateDir], { SVC_ADMIN_TOKEN: '', SVC_USER_TOKEN: '' });
    const r = await runCli(BIN.control, ['--url', own.url, 'auth_status'], { env: { SVC_AUTH_TOKEN: '', SVC_STATE_DIR: stateDir } });
    expect(r.code).toBe(0);
    const status = JSON.parse(r.stdout);
    expect(status.path).toBe(join(stateDir, 'auth_tokens.json'));
    expect(status.admin_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(status.user_token).not.toBe(status.admin_token);
    expect(statSync(status.path).mode & 0o777).toBe(0o600);
    // auth_rotate: the old user token opens nothing more, the new one does, and it is the one on disk
    const as = (token: string, args: string[]) => runCli(BIN.control, ['--url', own.url, ...args], { env: { SVC_AUTH_TOKEN: token } });
    const rotated = await as(status.admin_token, ['auth_rotate', '{"role":"user"}']);
    expect(rotated.code).toBe(0);
    const { token } = JSON.parse(rotated.stdout);
    expect(token).not.toBe(status.user_token);
    expect((await as(status.user_token, ['ping'])).code).toBe(2);
    expect((await as(token, ['ping'])).code).toBe(0);
    expect(JSON.parse(readFileSync(status.path, 'utf8'))).toEqual({ admin_token: status.admin_token, user_token: token });
    expect(statSync(status.path).mode & 0o777).toBe(0o600);
    await own.stop();
  });

  it('--watch keeps the session and prints pushed events as JSON lines', async () => {
    const child = spawn(process.execPath, [BIN.control, '--url', svc.url, '--watch', 'debug_subscribe'], {
      env: { ...process.env, SVC_AUTH_TOKEN: ADMIN_TOKEN },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    try {
      await waitFor(() => out.includes('"subscribed": true'), 10_000);
      const project = JSON.parse((await cli(['project_create', '{"name":"watched"}'])).stdout);
      const invite = JSON.parse((await cli(['node_invite_create'])).stdout);
      const node = JSON.parse((await cli(['node_join', JSON.stringify({ invite_token: invite.invite_token, node_name: 'w', fs_url: 'ws://h:1/' })])).stdout);
      await cli(['project_mount_set', JSON.stringify({ project_id: project.project_id, node_id: node.node_id, export_name: 'work', mount_path: '/w' })]);
      const line = await waitFor(
        () => out.split('\n').find((l) => l.startsWith('{"type":"control.workspace_availability"') && l.includes(project.project_id)),
        5000,
      );
      expect(JSON.parse(line)).toMatchObject({
        type: 'control.workspace_availability',
        payload: { project_id: project.project_id, mount_path: '/w', state: 'online', previous_state: null },
      });
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      child.kill('SIGINT');
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
