import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rootCertificates } from 'node:tls';
import { describeWithOpenssl, useTestCa } from '../../../test/helpers/tls';
import { ConfigError, loadFsNodeConfig } from './config';

describeWithOpenssl('svc-fs-node TLS configuration', () => {
  let dir: string;
  const ca = useTestCa();
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-fs-node-tls-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const daemon = ['--control-url', 'wss://svc.example:18790/', '--control-auth-token', 't'];

  it('serves TLS with --tls-cert/--tls-key (or SVC_TLS_CERT/KEY), also beyond loopback', () => {
    const c = ca.issue('cfg-node');
    const flags = loadFsNodeConfig(['--bind', '0.0.0.0', '--tls-cert', c.cert, '--tls-key', c.key], {}, dir);
    expect(flags.tls?.material.subject).toBe('CN=cfg-node');
    expect(flags.insecureTransport).toBe(false);
    const env = loadFsNodeConfig([], { SVC_TLS_CERT: c.cert, SVC_TLS_KEY: c.key }, dir);
    expect(env.tls?.material.fingerprint256).toBe(flags.tls?.material.fingerprint256);
    expect(loadFsNodeConfig([], {}, dir).tls).toBeNull();
  });

  it('refuses a bind beyond loopback without TLS unless --insecure-transport', () => {
    expect(() => loadFsNodeConfig(['--bind', '0.0.0.0'], {}, dir)).toThrow(ConfigError);
    expect(() => loadFsNodeConfig(['--bind', '10.0.0.1'], {}, dir)).toThrow(/--bind 10\.0\.0\.1 is reachable from other hosts/);
    expect(loadFsNodeConfig(['--bind', '0.0.0.0', '--insecure-transport'], {}, dir).insecureTransport).toBe(true);
  });

  it('takes --tls-ca (else SVC_TLS_CA) for the control session, in daemon mode only', () => {
    expect(loadFsNodeConfig(daemon, {}, dir).daemon?.tls).toEqual({ ca: [...rootCertificates], caFile: null });
    expect(loadFsNodeConfig([...daemon, '--tls-ca', ca.cert], {}, dir).daemon?.tls.caFile).toBe(ca.cert);
    expect(loadFsNodeConfig(daemon, { SVC_TLS_CA: ca.cert }, dir).daemon?.tls.ca).toHaveLength(rootCertificates.length + 1);
    expect(() => loadFsNodeConfig([...daemon, '--tls-ca', 'missing.pem'], {}, dir)).toThrow(`TLS CA file ${join(dir, 'missing.pem')}: the file does not exist`);
    expect(() => loadFsNodeConfig(['--tls-ca', ca.cert], {}, dir)).toThrow('--tls-ca needs --control-url');
    // SVC_TLS_CA in the environment of a standalone node is not an error
    expect(loadFsNodeConfig([], { SVC_TLS_CA: ca.cert }, dir).daemon).toBeNull();
  });

  it('advertises wss:// only: --fs-url ws:// with TLS is refused', () => {
    const c = ca.issue('cfg-fsurl');
    const tls = ['--tls-cert', c.cert, '--tls-key', c.key];
    expect(() => loadFsNodeConfig([...daemon, ...tls, '--fs-url', 'ws://node.example:18891/v2/fs'], {}, dir)).toThrow(
      /this node serves TLS \(--tls-cert\), so the URL it advertises must be wss:\/\//,
    );
    expect(loadFsNodeConfig([...daemon, ...tls, '--fs-url', 'wss://node.example:18891/v2/fs'], {}, dir).daemon?.fsUrl).toBe('wss://node.example:18891/v2/fs');
  });

  it('refuses unusable certificate files as configuration errors naming the file', () => {
    const c = ca.issue('cfg-bad');
    expect(() => loadFsNodeConfig(['--tls-cert', c.cert, '--tls-key', ca.cert], {}, dir)).toThrow(
      new ConfigError(`TLS key ${ca.cert}: it holds a certificate, not a private key`),
    );
    expect(() => loadFsNodeConfig(['--tls-key', c.key], {}, dir)).toThrow(/needs --tls-cert FILE/);
  });
});
