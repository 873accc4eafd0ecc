import { Logger } from '@nestjs/common';
import { X509Certificate } from 'node:crypto';
import { copyFileSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { Server as HttpsServer } from 'node:https';
import { join } from 'node:path';
import { connect as tlsConnect, ConnectionOptions } from 'node:tls';
import { describeWithOpenssl, makeCa, peerFingerprint, TestCa, useTestCa } from '../../../test/helpers/tls';
import { cleanupTmp, tmpDir, waitFor } from '../../../test/support/processes';
import { loadCertificateMaterial, TlsFileError } from './tls-certificate';
import { ServerTls } from './tls-listener';
import { thrown } from '../../../test/helpers/thrown';

const fingerprint = (certFile: string) => new X509Certificate(readFileSync(certFile)).fingerprint256;

describeWithOpenssl('loadCertificateMaterial', () => {
  const ca = useTestCa();

  it('loads a certificate with its key', () => {
    const c = ca.issue('unit-good');
    const m = loadCertificateMaterial({ certFile: c.cert, keyFile: c.key });
    expect(m.fingerprint256).toBe(fingerprint(c.cert));
    expect(m.subject).toBe('CN=unit-good');
    expect(m.subjectAltName).toBe('IP Address:127.0.0.1, DNS:localhost');
    expect(m.validTo.getTime()).toBeGreaterThan(Date.now());
  });

  it('refuses, naming the file and the reason: expired, not yet valid, another key, not PEM, missing', () => {
    const good = ca.issue('unit-ok');
    const expired = ca.issue('unit-expired', { notBefore: new Date('2021-01-01T00:00:00Z'), notAfter: new Date('2021-06-01T00:00:00Z') });
    const future = ca.issue('unit-future', { notBefore: new Date(Date.now() + 86_400_000), notAfter: new Date(Date.now() + 2 * 86_400_000) });
    const other = ca.issue('unit-other');
    const garbage = join(tmpDir('tls-unit-'), 'garbage.pem');
    writeFileSync(garbage, 'garbage');
    const cases: Array<[{ certFile: string; keyFile: string }, string, RegExp]> = [
      [{ certFile: expired.cert, keyFile: expired.key }, expired.cert, /expired on 2021-06-01T00:00:00\.000Z: renew it$/],
      [{ certFile: future.cert, keyFile: future.key }, future.cert, /is not valid before .* \(check this machine's clock\)$/],
      [{ certFile: good.cert, keyFile: other.key }, other.key, /does not match the certificate .*unit-ok\.pem \(CN=unit-ok\)/],
      [{ certFile: garbage, keyFile: good.key }, garbage, /: not a PEM certificate/],
      [{ certFile: good.cert, keyFile: garbage }, garbage, /: not a PEM private key/],
      [{ certFile: good.cert, keyFile: good.cert }, good.cert, /: it holds a certificate, not a private key$/],
      [{ certFile: join(ca.dir, 'nope.pem'), keyFile: good.key }, join(ca.dir, 'nope.pem'), /: the file does not exist$/],
      [{ certFile: good.cert, keyFile: ca.dir }, ca.dir, /: it is a directory$/],
    ];
    for (const [files, file, reason] of cases) {
      const err = thrown(() => loadCertificateMaterial(files));
      expect(err).toBeInstanceOf(TlsFileError);
      expect((err as TlsFileError).file).toBe(file);
      expect((err as Error).message).toContain(file);
      expect((err as Error).message).toMatch(reason);
    }
  });
});

describeWithOpenssl('ServerTls: rotation without a restart', () => {
  let ca: TestCa;
  let dir: string;
  let server: HttpsServer;
  let tls: ServerTls;
  let url: string;
  const files = () => ({ certFile: join(dir, 'tls.crt'), keyFile: join(dir, 'tls.key') });
  const place = (c: { cert: string; key: string }) => {
    copyFileSync(c.key, join(dir, 'k.tmp'));
    copyFileSync(c.cert, join(dir, 'c.tmp'));
    renameSync(join(dir, 'k.tmp'), files().keyFile);
    renameSync(join(dir, 'c.tmp'), files().certFile);
  };

  let logs: jest.SpyInstance<void, unknown[]>;
  beforeAll(async () => {
    logs = jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
    ca = makeCa();
    dir = tmpDir('tls-rotate-unit-');
    place(ca.issue('r1'));
    tls = ServerTls.load(files(), { checkIntervalMs: 60_000 });
    server = tls.createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const addr = server.address();
    url = `https://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}/`;
    tls.attach(server);
  });
  afterAll(async () => {
    logs.mockRestore();
    tls.close();
    await new Promise((r) => server.close(r));
    cleanupTmp();
  });

  it('speaks TLS 1.2 or 1.3 only, preferring AES-128-GCM', async () => {
    const port = Number(new URL(url).port);
    const negotiated = (options: ConnectionOptions) =>
      new Promise<string>((resolve) => {
        const s = tlsConnect({ host: '127.0.0.1', port, ca: readFileSync(ca.cert), ...options }, () => {
          resolve(`${s.getProtocol()} ${s.getCipher().name}`);
          s.end();
        });
        s.once('error', (e: NodeJS.ErrnoException) => resolve(`refused: ${e.code}`));
      });
    expect(await negotiated({})).toBe('TLSv1.3 TLS_AES_128_GCM_SHA256');
    expect(await negotiated({ maxVersion: 'TLSv1.2' })).toBe('TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256');
    expect(await negotiated({ minVersion: 'TLSv1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' })).toMatch(/^refused: /);
  });

  it('serves a renamed-in pair to new connections (file watch), and the old one until then', async () => {
    const before = await peerFingerprint(url, ca.cert);
    expect(before).toBe(tls.current.fingerprint256);
    const next = ca.issue('r2');
    place(next);
    // the periodic check is a minute away here: the directory watch finds it
    await waitFor(async () => (await peerFingerprint(url, ca.cert)) === fingerprint(next.cert), 5000, 50);
    expect(tls.current.fingerprint256).toBe(fingerprint(next.cert));
    expect(tls.current.subject).toBe('CN=r2');
    expect(JSON.stringify(logs.mock.calls[logs.mock.calls.length - 1][0])).toContain('TLS certificate reloaded (file change)');
  });

  it('keeps serving the current certificate when the files do not load, and logs the error once per version', async () => {
    const errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      const served = tls.current.fingerprint256;
      writeFileSync(files().certFile, 'garbage');
      await waitFor(() => errors.mock.calls.length > 0, 5000);
      expect(tls.reload('test')).toBe(false);
      expect(tls.reload('test')).toBe(false);
      expect(errors).toHaveBeenCalledTimes(1);
      expect(JSON.stringify(errors.mock.calls[0][0])).toContain('still serving the previous certificate');
      expect(JSON.stringify(errors.mock.calls[0][0])).toContain('not a PEM certificate');
      expect(await peerFingerprint(url, ca.cert)).toBe(served);
      // forced (SIGHUP) re-reads and logs again
      expect(tls.reload('SIGHUP', true)).toBe(false);
      expect(errors).toHaveBeenCalledTimes(2);
      // an expired pair is refused the same way
      const expired = ca.issue('r-expired', { notBefore: new Date('2021-01-01T00:00:00Z'), notAfter: new Date('2021-02-01T00:00:00Z') });
      place(expired);
      expect(tls.reload('test')).toBe(false);
      expect(JSON.stringify(errors.mock.calls[errors.mock.calls.length - 1][0])).toContain('expired on 2021-02-01');
      expect(await peerFingerprint(url, ca.cert)).toBe(served);
      // a good pair again is served
      const good = ca.issue('r3');
      place(good);
      expect(tls.reload('test')).toBe(true);
      expect(await peerFingerprint(url, ca.cert)).toBe(fingerprint(good.cert));
      // unchanged files: nothing to do
      expect(tls.reload('test')).toBe(false);
    } finally {
      errors.mockRestore();
    }
  });

  it('re-reads on SIGHUP', async () => {
    const next = ca.issue('r-hup');
    // written while not followed, so no watch event will pick the change up: only the signal
    tls.close();
    writeFileSync(files().keyFile, readFileSync(next.key));
    writeFileSync(files().certFile, readFileSync(next.cert));
    tls.attach(server);
    expect(await peerFingerprint(url, ca.cert)).not.toBe(fingerprint(next.cert));
    process.emit('SIGHUP', 'SIGHUP');
    expect(await peerFingerprint(url, ca.cert)).toBe(fingerprint(next.cert));
  });
});
