import { insecureTransportWarning, isLoopbackBind, resolveTransportSecurity } from './tls-config';
import { thrown } from '../../../test/helpers/thrown';

class TestConfigError extends Error {}

describe('isLoopbackBind', () => {
  it('takes 127.0.0.0/8, ::1 and localhost as loopback', () => {
    for (const b of ['127.0.0.1', '127.1.2.3', '127.255.255.255', '::1', '[::1]', '0:0:0:0:0:0:0:1', 'localhost', 'LOCALHOST', '::ffff:127.0.0.1'])
      expect([b, isLoopbackBind(b)]).toEqual([b, true]);
  });
  it('takes everything else as reachable from other hosts', () => {
    for (const b of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', '127.0.0.1.evil', 'localhost.example', 'svc.internal', '::ffff:10.0.0.1', '128.0.0.1'])
      expect([b, isLoopbackBind(b)]).toEqual([b, false]);
  });
});

describe('resolveTransportSecurity', () => {
  const resolve = (flags: Parameters<typeof resolveTransportSecurity>[0], env: NodeJS.ProcessEnv = {}) => resolveTransportSecurity(flags, env, TestConfigError);

  it('loopback without TLS stays plain and quiet', () => {
    expect(resolve({ bind: '127.0.0.1' })).toEqual({ tls: null, insecure: false });
    expect(resolve({ bind: 'localhost', insecureTransport: true })).toEqual({ tls: null, insecure: false });
  });

  it('takes the files from the flags, else from SVC_TLS_CERT / SVC_TLS_KEY', () => {
    expect(resolve({ bind: '0.0.0.0', tlsCert: 'c.pem', tlsKey: 'k.pem' })).toEqual({ tls: { certFile: 'c.pem', keyFile: 'k.pem' }, insecure: false });
    expect(resolve({ bind: '0.0.0.0' }, { SVC_TLS_CERT: 'ec.pem', SVC_TLS_KEY: 'ek.pem' })).toEqual({
      tls: { certFile: 'ec.pem', keyFile: 'ek.pem' },
      insecure: false,
    });
    expect(resolve({ bind: '127.0.0.1', tlsCert: 'c.pem' }, { SVC_TLS_KEY: 'ek.pem' })).toEqual({
      tls: { certFile: 'c.pem', keyFile: 'ek.pem' },
      insecure: false,
    });
    // TLS wins over --insecure-transport
    expect(resolve({ bind: '0.0.0.0', tlsCert: 'c.pem', tlsKey: 'k.pem', insecureTransport: true }).insecure).toBe(false);
  });

  it('refuses half a pair and empty values', () => {
    expect(() => resolve({ bind: '127.0.0.1', tlsCert: 'c.pem' })).toThrow(/--tls-cert \(or SVC_TLS_CERT\) needs --tls-key FILE/);
    expect(() => resolve({ bind: '127.0.0.1' }, { SVC_TLS_KEY: 'k.pem' })).toThrow(/--tls-key \(or SVC_TLS_KEY\) needs --tls-cert FILE/);
    expect(() => resolve({ bind: '127.0.0.1', tlsCert: '', tlsKey: 'k' })).toThrow(/--tls-cert must not be empty/);
    // an empty variable is unset
    expect(resolve({ bind: '127.0.0.1' }, { SVC_TLS_CERT: '', SVC_TLS_KEY: '' })).toEqual({ tls: null, insecure: false });
  });

  it('refuses a bind beyond loopback without TLS, saying what to pass; --insecure-transport allows it', () => {
    for (const bind of ['0.0.0.0', '::', '10.1.2.3', 'svc.example']) {
      const err = thrown(() => resolve({ bind }));
      expect(err).toBeInstanceOf(TestConfigError);
      expect((err as Error).message).toContain(`--bind ${bind} is reachable from other hosts`);
      expect((err as Error).message).toContain('pass --tls-cert FILE --tls-key FILE');
      expect((err as Error).message).toContain('--insecure-transport');
      expect(resolve({ bind, insecureTransport: true })).toEqual({ tls: null, insecure: true });
    }
    expect(insecureTransportWarning('ws://0.0.0.0:1/')).toMatch(/^--insecure-transport: ws:\/\/0\.0\.0\.0:1\/ is reachable from other hosts without TLS/);
  });
});
