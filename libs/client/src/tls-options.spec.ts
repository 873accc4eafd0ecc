// jest's own typed expect: its asymmetric matchers (expect.stringContaining) are not `any`
import { expect } from '@jest/globals';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rootCertificates } from 'node:tls';
import { makeCa, opensslMissing } from '../../../test/helpers/tls';
import { cleanupTmp } from '../../../test/support/processes';
import { clientTlsFrom, describeTlsError, loadClientTls, TlsCaError, tlsSocketOptions } from './tls-options';
import { thrown } from '../../../test/helpers/thrown';

describe('client TLS trust', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-tls-options-'));
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
    cleanupTmp();
  });

  (opensslMissing() ? it.skip : it)('trusts the system CAs, plus every certificate of --tls-ca (needs openssl)', () => {
    expect(loadClientTls(null)).toEqual({ ca: [...rootCertificates], caFile: null });
    const ca = makeCa();
    const t = loadClientTls(ca.cert);
    expect(t.caFile).toBe(ca.cert);
    expect(t.ca.length).toBe(rootCertificates.length + 1);
    const two = join(dir, 'two.pem');
    writeFileSync(two, `# a bundle\n${t.ca[t.ca.length - 1]}\n${rootCertificates[0]}\n`);
    expect(loadClientTls(two).ca.length).toBe(rootCertificates.length + 2);
    // SVC_TLS_CA when no flag; the flag first; empty is unset
    expect(clientTlsFrom(undefined, { SVC_TLS_CA: ca.cert }).caFile).toBe(ca.cert);
    expect(clientTlsFrom(two, { SVC_TLS_CA: ca.cert }).caFile).toBe(two);
    expect(clientTlsFrom(undefined, { SVC_TLS_CA: '' }).caFile).toBeNull();
  });

  it('refuses a CA file it cannot use, naming it and the reason', () => {
    const none = join(dir, 'none.pem');
    writeFileSync(none, 'no certificate here\n');
    const broken = join(dir, 'broken.pem');
    writeFileSync(broken, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    const cases: Array<[string, RegExp]> = [
      [join(dir, 'missing.pem'), /: the file does not exist$/],
      [dir, /: it is a directory$/],
      [none, /: no PEM certificate in it/],
      [broken, /: certificate 1 is not valid PEM/],
    ];
    for (const [file, reason] of cases) {
      const err = thrown(() => loadClientTls(file));
      expect(err).toBeInstanceOf(TlsCaError);
      expect((err as TlsCaError).file).toBe(file);
      expect((err as Error).message).toMatch(new RegExp(`^TLS CA file ${file}`));
      expect((err as Error).message).toMatch(reason);
    }
  });

  it('always verifies: rejectUnauthorized is true with or without a CA file; one secure context per trust', () => {
    expect(tlsSocketOptions(undefined)).toEqual({ rejectUnauthorized: true });
    expect(tlsSocketOptions(loadClientTls(null))).toEqual({ rejectUnauthorized: true });
    const pem = join(dir, 'one.pem');
    writeFileSync(pem, rootCertificates[0]);
    const t = loadClientTls(pem);
    const a = tlsSocketOptions(t);
    expect(a.rejectUnauthorized).toBe(true);
    expect(a.secureContext).toBeDefined();
    expect(tlsSocketOptions(t).secureContext).toBe(a.secureContext);
    expect(tlsSocketOptions(loadClientTls(pem)).secureContext).not.toBe(a.secureContext);
  });

  it('names the URL and the reason of a refused certificate', () => {
    const url = 'wss://127.0.0.1:1/';
    const err = (code: string, extra: object = {}) => Object.assign(new Error(`some ${code} message`), { code, ...extra });
    const trust = loadClientTls(null);
    for (const code of ['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY']) {
      expect(describeTlsError(err(code), url, trust)).toEqual({
        message: `TLS: refused the certificate of ${url}: unknown CA: it is not signed by the system CAs (pass --tls-ca FILE or set SVC_TLS_CA to trust a private CA) (${code})`,
        verification: true,
      });
    }
    expect(describeTlsError(err('UNABLE_TO_VERIFY_LEAF_SIGNATURE'), url, { ca: [], caFile: '/etc/ca.pem' })!.message).toContain(
      'not signed by the system CAs or /etc/ca.pem',
    );
    expect(describeTlsError(err('CERT_HAS_EXPIRED'), url, trust)!.message).toBe(
      `TLS: refused the certificate of ${url}: the certificate has expired (CERT_HAS_EXPIRED)`,
    );
    expect(describeTlsError(err('CERT_NOT_YET_VALID'), url, trust)!.message).toContain('not valid yet');
    expect(
      describeTlsError(err('ERR_TLS_CERT_ALTNAME_INVALID', { host: '127.0.0.1', reason: "IP: 127.0.0.1 is not in the cert's list: " }), url, trust)!.message,
    ).toBe(`TLS: refused the certificate of ${url}: wrong host: the certificate is not for 127.0.0.1 (IP: 127.0.0.1 is not in the cert's list: )`);
    expect(describeTlsError(err('CERT_REVOKED'), url, trust)!.verification).toBe(true);
  });

  it('says which side speaks plain WebSocket when the handshake fails; leaves other errors alone', () => {
    const hangup = Object.assign(new Error('Client network socket disconnected before secure TLS connection was established'), { code: 'ECONNRESET' });
    expect(describeTlsError(hangup, 'wss://h:1/', undefined)).toEqual({
      message: expect.stringContaining(
        'TLS handshake with wss://h:1/ failed: the server closed the connection or did not answer in TLS (does it serve plain ws://? then use a ws:// URL)',
      ),
      verification: false,
    });
    const wrongVersion = Object.assign(new Error('wrong version number'), { code: 'ERR_SSL_WRONG_VERSION_NUMBER' });
    expect(describeTlsError(wrongVersion, 'wss://h:1/', undefined)!.message).toContain('does it serve plain ws://?');
    const plainHangup = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    expect(describeTlsError(plainHangup, 'ws://h:1/', undefined)!.message).toBe(
      'ws://h:1/: the server closed the connection without answering the WebSocket upgrade (if it serves TLS, use a wss:// URL)',
    );
    expect(describeTlsError(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }), 'wss://h:1/', undefined)).toBeNull();
    expect(describeTlsError(Object.assign(new Error('x'), { code: 'ENOTFOUND' }), 'ws://h:1/', undefined)).toBeNull();
  });
});
