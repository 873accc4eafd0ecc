import { rootCertificates } from 'node:tls';
import { describeWithOpenssl, useTestCa } from '../test/helpers/tls';
import { ConfigError, loadServerConfig } from './config';

describeWithOpenssl('svc TLS configuration', () => {
  const ca = useTestCa();

  it('serves TLS with --tls-cert/--tls-key and trusts --tls-ca for the FS routing', () => {
    const c = ca.issue('cfg-svc');
    const config = loadServerConfig(['--bind', '0.0.0.0', '--tls-cert', c.cert, '--tls-key', c.key, '--tls-ca', ca.cert], {});
    expect(config.tls?.material.subject).toBe('CN=cfg-svc');
    expect(config.clientTls.caFile).toBe(ca.cert);
    expect(config.clientTls.ca).toHaveLength(rootCertificates.length + 1);
    const plain = loadServerConfig([], { SVC_TLS_CA: '' });
    expect(plain.tls).toBeNull();
    expect(plain.clientTls).toEqual({ ca: [...rootCertificates], caFile: null });
    expect(loadServerConfig([], { SVC_TLS_CA: ca.cert }).clientTls.caFile).toBe(ca.cert);
  });

  it('refuses a bind beyond loopback without TLS unless --insecure-transport; bad files are configuration errors', () => {
    expect(() => loadServerConfig(['--bind', '0.0.0.0'], {})).toThrow(/--bind 0\.0\.0\.0 is reachable from other hosts/);
    expect(loadServerConfig(['--bind', '0.0.0.0', '--insecure-transport'], {}).insecureTransport).toBe(true);
    expect(loadServerConfig(['--bind', '127.0.0.1'], {}).insecureTransport).toBe(false);
    expect(() => loadServerConfig(['--tls-cert', ca.cert, '--tls-key', '/nonexistent/key.pem'], {})).toThrow(
      new ConfigError('TLS key /nonexistent/key.pem: the file does not exist'),
    );
    expect(() => loadServerConfig(['--tls-ca', '/nonexistent/ca.pem'], {})).toThrow(
      new ConfigError('TLS CA file /nonexistent/ca.pem: the file does not exist'),
    );
  });
});
