import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, isLoopbackBind, loadFsNodeConfig, parseExport, parseLabel } from './config';

describe('svc-fs-node configuration', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-fs-node-config-'));
    writeFileSync(join(dir, 'file'), '');
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('defaults: 127.0.0.1:18891, export work=.:rw, no auth, host name', () => {
    const c = loadFsNodeConfig([], {}, dir);
    expect(c).toMatchObject({ bind: '127.0.0.1', port: 18891, authToken: null, metricsPort: null, maxMessageBytes: 8 * 1024 * 1024, logLevel: 'info' });
    expect(c.exports).toEqual([{ name: 'work', path: dir, ro: false }]);
    expect(c.nodeName.length).toBeGreaterThan(0);
  });

  it('parses repeated exports with modes, relative paths and colons in paths', () => {
    const c = loadFsNodeConfig(['--export', 'a=.:ro', '--export', `b=${dir}:rw`, '--port', '0', '--node-name', 'n1'], {}, dir);
    expect(c.exports).toEqual([
      { name: 'a', path: dir, ro: true },
      { name: 'b', path: dir, ro: false },
    ]);
    expect(c.port).toBe(0);
    expect(c.nodeName).toBe('n1');
    expect(() => parseExport('x=/nonexistent:weird:ro')).toThrow(/does not exist/);
  });

  it('parses --label KEY=VALUE, refusing keys the control plane refuses in payloads', () => {
    expect(parseLabel('zone=eu-1=a')).toEqual(['zone', 'eu-1=a']);
    expect(() => parseLabel('.x=1')).toThrow(ConfigError);
    for (const key of ['__proto__', 'constructor', 'prototype']) expect(() => parseLabel(`${key}=1`)).toThrow(/must not be/);
  });

  it('grants every FS extension by default; --fs-features, else SVC_FS_NODE_FEATURES, narrows it', () => {
    expect(loadFsNodeConfig([], {}, dir).features).toEqual([
      'open_read',
      'prefetch',
      'dir_estale',
      'inval_ack',
      'posix',
      'inval_own',
      'dir_attr',
      'write_then',
    ]);
    expect(loadFsNodeConfig([], { SVC_FS_NODE_FEATURES: 'none' }, dir).features).toEqual([]);
    expect(loadFsNodeConfig([], { SVC_FS_NODE_FEATURES: 'prefetch' }, dir).features).toEqual(['prefetch']);
    expect(loadFsNodeConfig(['--fs-features', 'open_read'], { SVC_FS_NODE_FEATURES: 'none' }, dir).features).toEqual(['open_read']);
    expect(loadFsNodeConfig(['--fs-features', 'none'], {}, dir).features).toEqual([]);
    expect(() => loadFsNodeConfig(['--fs-features', 'open_read,turbo'], {}, dir)).toThrow(/--fs-features: unknown FS extension "turbo"/);
    expect(() => loadFsNodeConfig([], { SVC_FS_NODE_FEATURES: 'none,prefetch' }, dir)).toThrow(/SVC_FS_NODE_FEATURES: "none" cannot be combined/);
  });

  it('runs metadata calls in place by default; --meta-io, else SVC_FS_NODE_META_IO, can send them to the pool', () => {
    expect(loadFsNodeConfig([], {}, dir).metaIo).toBe('auto');
    expect(loadFsNodeConfig([], { SVC_FS_NODE_META_IO: 'pool' }, dir).metaIo).toBe('pool');
    expect(loadFsNodeConfig(['--meta-io', 'auto'], { SVC_FS_NODE_META_IO: 'pool' }, dir).metaIo).toBe('auto');
    expect(() => loadFsNodeConfig(['--meta-io', 'threads'], {}, dir)).toThrow(/--meta-io must be auto or pool \(got "threads"\)/);
    expect(() => loadFsNodeConfig([], { SVC_FS_NODE_META_IO: '' }, dir)).toThrow(/SVC_FS_NODE_META_IO must be auto or pool/);
  });

  it('takes the FS session token from --auth-token, else SVC_FS_NODE_AUTH_TOKEN', () => {
    expect(loadFsNodeConfig([], { SVC_FS_NODE_AUTH_TOKEN: 'env-token' }, dir).authToken).toBe('env-token');
    expect(loadFsNodeConfig(['--auth-token', 'flag-token'], { SVC_FS_NODE_AUTH_TOKEN: 'env-token' }, dir).authToken).toBe('flag-token');
    expect(loadFsNodeConfig([], { SVC_FS_NODE_AUTH_TOKEN: '' }, dir).authToken).toBeNull();
  });

  it.each([
    [['--export', 'w=missing'], /does not exist/],
    [['--export', 'w=file'], /not a directory/],
    [['--export', '=x'], /NAME=PATH/],
    [['--export', 'bad name=.'], /identifier-safe/],
    [['--export', 'w=.', '--export', 'w=.:ro'], /given twice/],
    [['--port', '-1'], /port/],
    [['--port', '65536'], /port/],
    [['--auth-token', ''], /must not be empty/],
    [['--bogus'], /Unknown option/],
  ])('rejects %j', (argv, message) => {
    expect(() => loadFsNodeConfig(argv, {}, dir)).toThrow(ConfigError);
    expect(() => loadFsNodeConfig(argv, {}, dir)).toThrow(message);
  });

  it('refuses a terminal without FS session auth in standalone mode', () => {
    expect(() => loadFsNodeConfig(['--terminal-id', 't1'], {}, dir)).toThrow(/--terminal-id runs programs for every FS session: it needs FS session auth/);
    expect(loadFsNodeConfig(['--terminal-id', 't1', '--auth-token', 'tok'], {}, dir).terminalIds).toEqual(['t1']);
    expect(loadFsNodeConfig(['--terminal-id', 't1'], { SVC_FS_NODE_AUTH_TOKEN: 'tok' }, dir).terminalIds).toEqual(['t1']);
    const daemon = loadFsNodeConfig(['--terminal-id', 't1', '--control-url', 'ws://127.0.0.1:1/'], { SVC_AUTH_TOKEN: 'role' }, dir);
    expect(daemon.daemon).not.toBeNull();
  });

  it('tells loopback binds from reachable ones', () => {
    for (const b of ['127.0.0.1', '127.1.2.3', '::1', 'localhost']) expect(isLoopbackBind(b)).toBe(true);
    for (const b of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', '127.0.0.1.evil']) expect(isLoopbackBind(b)).toBe(false);
  });

  it('reads the environment limits', () => {
    const c = loadFsNodeConfig([], { SVC_METRICS_PORT: '9100', SVC_MAX_MESSAGE_BYTES: String(4 << 20), SVC_LOG_LEVEL: 'DEBUG' }, dir);
    expect(c).toMatchObject({ metricsPort: 9100, maxMessageBytes: 4 << 20, logLevel: 'debug' });
    expect(() => loadFsNodeConfig([], { SVC_MAX_MESSAGE_BYTES: '1024' }, dir)).toThrow(/SVC_MAX_MESSAGE_BYTES/);
    expect(() => loadFsNodeConfig([], { SVC_LOG_LEVEL: 'loud' }, dir)).toThrow(/SVC_LOG_LEVEL/);
  });

  it('daemon lease: 30000 ms by default, refreshed every third of it unless --refresh-interval-ms says otherwise', () => {
    const env = { SVC_AUTH_TOKEN: 'role' };
    const url = ['--control-url', 'ws://127.0.0.1:1/'];
    expect(loadFsNodeConfig(url, env, dir).daemon).toMatchObject({ leaseTtlMs: 30_000, refreshIntervalMs: 10_000 });
    expect(loadFsNodeConfig([...url, '--lease-ttl-ms', '3000'], env, dir).daemon).toMatchObject({ leaseTtlMs: 3000, refreshIntervalMs: 1000 });
    expect(loadFsNodeConfig([...url, '--lease-ttl-ms', '3000', '--refresh-interval-ms', '250'], env, dir).daemon).toMatchObject({
      leaseTtlMs: 3000,
      refreshIntervalMs: 250,
    });
    expect(() => loadFsNodeConfig([...url, '--lease-ttl-ms', '999'], env, dir)).toThrow(/--lease-ttl-ms must be an integer from 1000 to 86400000/);
    expect(() => loadFsNodeConfig([...url, '--lease-ttl-ms', '86400001'], env, dir)).toThrow(/--lease-ttl-ms/);
  });
});
