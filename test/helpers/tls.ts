/**
 * Certificates for TLS e2e tests, made by the test itself with the `openssl` command line
 * (OpenSSL 1.1 or 3): a throwaway CA, server certificates with chosen subject alternative names
 * and validity windows (`openssl ca -startdate/-enddate`, so an already expired certificate
 * can be made without faking the clock), and a tiny recording TCP proxy for capture tests.
 */
import { execFileSync } from 'node:child_process';
import { connect as netConnect, createServer, Server, Socket } from 'node:net';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { cleanupTmp, tmpDir } from '../support/processes';

/** A certificate and its key, as PEM files. */
export interface CertFiles {
  cert: string;
  key: string;
}

/** A test CA: its certificate (PEM file) and what issues certificates under it. */
export interface TestCa {
  /** The CA certificate, PEM file (what clients pass to `--tls-ca`). */
  cert: string;
  dir: string;
  /**
   * Issues a server certificate.
   * @param name file name stem and common name
   * @param options.sans subject alternative names (default `IP:127.0.0.1`, `DNS:localhost`)
   * @param options.notBefore / notAfter validity window (default: one hour ago to one day ahead)
   */
  issue(name: string, options?: { sans?: string[]; notBefore?: Date; notAfter?: Date }): CertFiles;
}

/** Why certificates cannot be made here (no `openssl`), or null. */
export function opensslMissing(): string | null {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return null;
  } catch (e) {
    return `openssl is not available (${(e as Error).message.split('\n')[0]}; Debian: apt-get install openssl)`;
  }
}

/** `describe`, or `describe.skip` with the reason printed when `openssl` is missing. */
export function describeWithOpenssl(name: string, fn: () => void): void {
  const missing = opensslMissing();
  if (missing) process.stdout.write(`${name}: skipped: ${missing}\n`);
  (missing ? describe.skip : describe)(name, fn);
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** `YYYYMMDDHHMMSSZ` as `openssl ca -startdate/-enddate` takes it. */
function asn1Time(d: Date): string {
  return `${d.toISOString().replace(/[-:T]/g, '').slice(0, 14)}Z`;
}

/**
 * A test CA ({@link makeCa}) for the tests of the `describe` block this is called in: made before
 * them (beforeAll); after them (afterAll) every temporary directory of test/support/processes.ts
 * is removed, the CA's with the rest.
 * @returns the CA, its fields set once it is made (read them in the tests, not when the file loads)
 */
export function useTestCa(): TestCa {
  const ca = {} as TestCa;
  beforeAll(() => {
    Object.assign(ca, makeCa());
  });
  afterAll(() => cleanupTmp());
  return ca;
}

/** Makes a new CA (EC P-256) in a temporary directory (or `dir`). */
export function makeCa(name = 'svc test CA', dir = tmpDir('tls-ca-')): TestCa {
  mkdirSync(join(dir, 'issued'), { recursive: true });
  writeFileSync(join(dir, 'index.txt'), '');
  writeFileSync(join(dir, 'serial'), '1000\n');
  writeFileSync(
    join(dir, 'ca.cnf'),
    [
      '[ ca ]',
      'default_ca = test_ca',
      '[ test_ca ]',
      `dir = ${dir}`,
      'database = $dir/index.txt',
      'serial = $dir/serial',
      'new_certs_dir = $dir/issued',
      'default_md = sha256',
      'policy = policy_any',
      'unique_subject = no',
      'email_in_dn = no',
      '[ policy_any ]',
      'commonName = supplied',
      '',
    ].join('\n'),
  );
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      'ca.key',
      '-out',
      'ca.pem',
      '-days',
      '30',
      '-subj',
      `/CN=${name}`,
    ],
    dir,
  );
  const cert = join(dir, 'ca.pem');
  return {
    cert,
    dir,
    issue(stem, options = {}) {
      const sans = options.sans ?? ['IP:127.0.0.1', 'DNS:localhost'];
      const notBefore = options.notBefore ?? new Date(Date.now() - 3600_000);
      const notAfter = options.notAfter ?? new Date(Date.now() + 86_400_000);
      const key = join(dir, `${stem}.key`);
      const csr = join(dir, `${stem}.csr`);
      const out = join(dir, `${stem}.pem`);
      const ext = join(dir, `${stem}.ext`);
      writeFileSync(
        ext,
        `basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=${sans.join(',')}\n`,
      );
      openssl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${stem}`], dir);
      openssl(
        [
          'ca',
          '-batch',
          '-config',
          join(dir, 'ca.cnf'),
          '-cert',
          cert,
          '-keyfile',
          join(dir, 'ca.key'),
          '-in',
          csr,
          '-out',
          out,
          '-notext',
          '-extfile',
          ext,
          '-startdate',
          asn1Time(notBefore),
          '-enddate',
          asn1Time(notAfter),
        ],
        dir,
      );
      return { cert: out, key };
    },
  };
}

/**
 * The SHA-256 fingerprint (`AB:CD:...`) of the certificate a TLS server presents to a new
 * connection, verified against `ca`.
 */
export function peerFingerprint(url: string, ca: string): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = tlsConnect(
      {
        host: u.hostname,
        port: Number(u.port),
        ca: readFileSync(ca),
        rejectUnauthorized: true,
        servername: /^[\d.]+$/.test(u.hostname) ? undefined : u.hostname,
      },
      () => {
        const fp = socket.getPeerCertificate().fingerprint256;
        socket.end();
        resolve(fp);
      },
    );
    socket.once('error', reject);
  });
}

/** A TCP proxy that records every byte in both directions. */
export interface RecordingProxy {
  /** Port on 127.0.0.1. */
  port: number;
  /** Bytes from clients to the target. */
  upstream(): Buffer;
  /** Bytes from the target to clients. */
  downstream(): Buffer;
  /** Connections accepted so far. */
  connections(): number;
  close(): Promise<void>;
}

/** Starts a {@link RecordingProxy} on 127.0.0.1 in front of `targetPort`. */
export function recordingProxy(targetPort: number): Promise<RecordingProxy> {
  const up: Buffer[] = [];
  const down: Buffer[] = [];
  const sockets = new Set<Socket>();
  let count = 0;
  const server: Server = createServer((client) => {
    count++;
    const target = netConnect(targetPort, '127.0.0.1');
    sockets.add(client).add(target);
    client.on('data', (d: Buffer) => {
      up.push(Buffer.from(d));
      target.write(d);
    });
    target.on('data', (d: Buffer) => {
      down.push(Buffer.from(d));
      client.write(d);
    });
    const end = () => {
      client.destroy();
      target.destroy();
    };
    client.on('close', end).on('error', end);
    target.on('close', end).on('error', end);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const addr = server.address();
      resolve({
        port: typeof addr === 'object' && addr ? addr.port : 0,
        upstream: () => Buffer.concat(up),
        downstream: () => Buffer.concat(down),
        connections: () => count,
        close: () =>
          new Promise<void>((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    }),
  );
}

/**
 * The payloads of the client-to-server WebSocket frames in a plain `ws://` capture, unmasked
 * (RFC 6455 5.3: a client masks every frame, so a token in a frame is not found by a byte
 * search of the raw capture). Starts after the HTTP upgrade request; stops at an incomplete
 * frame.
 */
export function unmaskedClientPayloads(capture: Buffer): Buffer {
  const start = capture.indexOf('\r\n\r\n');
  if (start < 0) return Buffer.alloc(0);
  const out: Buffer[] = [];
  let i = start + 4;
  while (i + 2 <= capture.length) {
    const masked = (capture[i + 1] & 0x80) !== 0;
    let len = capture[i + 1] & 0x7f;
    let p = i + 2;
    if (len === 126) {
      if (p + 2 > capture.length) break;
      len = capture.readUInt16BE(p);
      p += 2;
    } else if (len === 127) {
      if (p + 8 > capture.length) break;
      len = Number(capture.readBigUInt64BE(p));
      p += 8;
    }
    const key = masked ? capture.subarray(p, p + 4) : null;
    if (masked) p += 4;
    if (p + len > capture.length) break;
    const payload = Buffer.from(capture.subarray(p, p + len));
    if (key) for (let j = 0; j < payload.length; j++) payload[j] ^= key[j & 3];
    out.push(payload);
    i = p + len;
  }
  return Buffer.concat(out);
}
