/**
 * The certificate and key of a TLS listener, read and checked (docs/operations.md "Transport security (TLS)").
 * Only Node built-ins here: the programs' configuration loads this module (a bad file is a
 * configuration error, exit 2) without loading the server; `tls-listener.ts` serves the result.
 */
import { createPrivateKey, KeyObject, X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { createSecureContext } from 'node:tls';
import type { ServerTlsFiles } from './tls-config';

/** A certificate or key file that cannot be served; `message` names the file and the reason. */
export class TlsFileError extends Error {
  constructor(
    /** The file at fault (as configured). */
    readonly file: string,
    message: string,
  ) {
    super(message);
    this.name = 'TlsFileError';
  }
}

/** A loaded, checked certificate and key. */
export interface CertificateMaterial {
  /** The certificate file's bytes (PEM chain). */
  cert: Buffer;
  /** The key file's bytes (PEM). */
  key: Buffer;
  /** SHA-256 fingerprint of the server certificate, `AB:CD:...`. */
  fingerprint256: string;
  /** Subject, e.g. `CN=node-a.example`. */
  subject: string;
  /** Subject alternative names, e.g. `DNS:node-a.example, IP Address:10.0.0.5`; null when none. */
  subjectAltName: string | null;
  validFrom: Date;
  validTo: Date;
}

function readPem(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const reason =
      code === 'ENOENT'
        ? 'the file does not exist'
        : code === 'EACCES' || code === 'EPERM'
          ? 'permission denied'
          : code === 'EISDIR'
            ? 'it is a directory'
            : `cannot be read (${code ?? (e as Error).message})`;
    throw new TlsFileError(file, `${what} ${file}: ${reason}`);
  }
}

/**
 * Reads and checks a certificate and its key (docs/protocol.md "Transport").
 * @param files the PEM files
 * @param now the time the certificate must be valid at, ms since the epoch
 * @returns the material to serve
 * @throws TlsFileError naming the file and the reason: missing or unreadable, not PEM, an
 *   encrypted key, a key that is not the certificate's, a certificate expired or not yet valid
 */
export function loadCertificateMaterial(files: ServerTlsFiles, now = Date.now()): CertificateMaterial {
  const cert = readPem(files.certFile, 'TLS certificate');
  const key = readPem(files.keyFile, 'TLS key');
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch (e) {
    throw new TlsFileError(files.certFile, `TLS certificate ${files.certFile}: not a PEM certificate (${(e as Error).message})`);
  }
  let keyObject: KeyObject;
  try {
    keyObject = createPrivateKey(key);
  } catch (e) {
    const text = key.toString('latin1');
    const code = (e as NodeJS.ErrnoException).code;
    const reason =
      /ENCRYPTED/.test(text) || code === 'ERR_MISSING_PASSPHRASE' || code === 'ERR_OSSL_CRYPTO_INTERRUPTED_OR_CANCELLED'
        ? 'the key is encrypted with a passphrase; give it unencrypted (openssl pkey -in KEY -out KEY.plain), readable by this user only'
        : /-----BEGIN CERTIFICATE-----/.test(text) && !/PRIVATE KEY-----/.test(text)
          ? 'it holds a certificate, not a private key'
          : `not a PEM private key (${(e as Error).message})`;
    throw new TlsFileError(files.keyFile, `TLS key ${files.keyFile}: ${reason}`);
  }
  if (!x509.checkPrivateKey(keyObject)) {
    throw new TlsFileError(
      files.keyFile,
      `TLS key ${files.keyFile} does not match the certificate ${files.certFile} (${x509.subject.replace(/\n/g, ', ')}): give the key the certificate was issued for`,
    );
  }
  const validFrom = new Date(x509.validFrom);
  const validTo = new Date(x509.validTo);
  if (validTo.getTime() <= now) {
    throw new TlsFileError(files.certFile, `TLS certificate ${files.certFile} expired on ${validTo.toISOString()}: renew it`);
  }
  if (validFrom.getTime() > now) {
    throw new TlsFileError(files.certFile, `TLS certificate ${files.certFile} is not valid before ${validFrom.toISOString()} (check this machine's clock)`);
  }
  try {
    createSecureContext({ cert, key });
  } catch (e) {
    throw new TlsFileError(files.certFile, `TLS certificate ${files.certFile} with key ${files.keyFile} cannot be served: ${(e as Error).message}`);
  }
  return {
    cert,
    key,
    fingerprint256: x509.fingerprint256,
    subject: x509.subject.replace(/\n/g, ', '),
    subjectAltName: x509.subjectAltName ?? null,
    validFrom,
    validTo,
  };
}

/** What the configuration hands the listener: the files, what they held, and their version. */
export interface LoadedServerTls {
  files: ServerTlsFiles;
  material: CertificateMaterial;
  /** The files' version when read ({@link filesSignature}), so a change since is noticed. */
  signature: string;
}

/**
 * The version of the files: per file its inode, size and times (the error code when it cannot
 * be stat'ed). Symbolic links are followed, so a replaced link target (cert-manager's `..data`)
 * is a new version.
 */
export function filesSignature(files: ServerTlsFiles): string {
  return [files.certFile, files.keyFile]
    .map((f) => {
      try {
        const s = statSync(resolve(f));
        return `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
      } catch (e) {
        return `!${(e as NodeJS.ErrnoException).code ?? 'error'}`;
      }
    })
    .join('|');
}

/**
 * Reads and checks a listener's certificate and key ({@link loadCertificateMaterial}), noting
 * the files' version first.
 * @throws TlsFileError naming the file and the reason
 */
export function loadServerTls(files: ServerTlsFiles): LoadedServerTls {
  const signature = filesSignature(files);
  return { files, material: loadCertificateMaterial(files), signature };
}
