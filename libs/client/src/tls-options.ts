/**
 * How every client verifies a `wss://` server (docs/operations.md "Transport security (TLS)"): against the
 * system CAs plus the CA file of `--tls-ca FILE` / `SVC_TLS_CA`, with the host name checked,
 * and `rejectUnauthorized: true` passed explicitly so nothing (not even
 * `NODE_TLS_REJECT_UNAUTHORIZED=0`) turns verification off. There is no switch to skip it.
 * Verification failures become one clear sentence naming the URL and the reason.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, rootCertificates, SecureContext } from 'node:tls';

/** The trust of a client: which CAs sign the servers it accepts. */
export interface ClientTls {
  /** PEM certificates: the system CAs (`tls.rootCertificates`) and those of {@link caFile}. */
  readonly ca: readonly string[];
  /** The extra CA file (`--tls-ca`), for messages; null: system CAs only. */
  readonly caFile: string | null;
}

/** `--tls-ca` / `SVC_TLS_CA` cannot be used; `message` names the file and the reason (exit 2). */
export class TlsCaError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(message);
    this.name = 'TlsCaError';
  }
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/**
 * The trust of a client: the system CAs plus every certificate in `caFile`.
 * @param caFile PEM file of one or more CA certificates (`--tls-ca`, else `SVC_TLS_CA`); null or
 *   undefined: system CAs only
 * @throws TlsCaError when the file cannot be read or holds no valid PEM certificate
 */
export function loadClientTls(caFile: string | null | undefined): ClientTls {
  if (caFile === null || caFile === undefined || caFile === '') return trust([], null);
  let text: string;
  try {
    text = readFileSync(caFile, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new TlsCaError(
      caFile,
      `TLS CA file ${caFile}: ${code === 'ENOENT' ? 'the file does not exist' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'it is a directory' : `cannot be read (${code})`}`,
    );
  }
  const pems = text.match(PEM_CERT) ?? [];
  if (pems.length === 0) throw new TlsCaError(caFile, `TLS CA file ${caFile}: no PEM certificate in it (expected -----BEGIN CERTIFICATE----- blocks)`);
  for (const [i, pem] of pems.entries()) {
    try {
      new X509Certificate(pem);
    } catch (e) {
      throw new TlsCaError(caFile, `TLS CA file ${caFile}: certificate ${i + 1} is not valid PEM (${(e as Error).message})`);
    }
  }
  return trust(pems, caFile);
}

/**
 * A trust of the system CAs plus `extra`. The system CAs are read on first use of `ca`: a
 * client that never connects over TLS does not load them (nor, in the command-line bundles,
 * Node's TLS modules).
 */
function trust(extra: readonly string[], caFile: string | null): ClientTls {
  let ca: readonly string[] | undefined;
  return {
    caFile,
    get ca() {
      return (ca ??= [...rootCertificates, ...extra]);
    },
  };
}

/**
 * The CA file a client uses: the flag, else `SVC_TLS_CA` (empty counts as unset).
 * @returns the trust ({@link loadClientTls})
 * @throws TlsCaError as {@link loadClientTls}
 */
export function clientTlsFrom(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): ClientTls {
  return loadClientTls(flag ?? (env.SVC_TLS_CA || undefined));
}

/** One secure context per trust with a CA file: building one parses every CA (tens of ms). */
const contexts = new WeakMap<ClientTls, SecureContext>();

/**
 * The socket options of a client connection: verification always on. Without a CA file Node's
 * own store of the system CAs is used; with one, a secure context holding the system CAs and
 * the file's, built once per {@link ClientTls} and shared by its connections.
 */
export function tlsSocketOptions(tls: ClientTls | undefined): { rejectUnauthorized: true; secureContext?: SecureContext } {
  if (!tls || tls.caFile === null) return { rejectUnauthorized: true };
  let context = contexts.get(tls);
  if (!context) {
    context = createSecureContext({ ca: [...tls.ca] });
    contexts.set(tls, context);
  }
  return { rejectUnauthorized: true, secureContext: context };
}

const UNKNOWN_CA = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'INVALID_CA',
  'CERT_CHAIN_TOO_LONG',
]);

/**
 * Describes a failed connection attempt in TLS terms, or returns null when the error is not
 * about TLS. Verification failures name the reason (unknown CA, expired, another host name),
 * handshake failures say which side likely speaks plain WebSocket.
 * @param err the socket error (`code` as set by Node: `CERT_HAS_EXPIRED`,
 *   `ERR_TLS_CERT_ALTNAME_INVALID`, `ERR_SSL_*`, ...)
 * @param url the URL being opened
 * @param tls the trust used (for the "unknown CA" hint)
 * @returns `{message, verification}`: verification is true when the server's certificate was refused
 */
export function describeTlsError(
  err: NodeJS.ErrnoException & { reason?: string; host?: string },
  url: string,
  tls: ClientTls | undefined,
): { message: string; verification: boolean } | null {
  const code = err.code ?? '';
  const secure = url.startsWith('wss:');
  const refused = (reason: string) => ({ message: `TLS: refused the certificate of ${url}: ${reason}`, verification: true });
  if (UNKNOWN_CA.has(code)) {
    const trust = tls?.caFile ? `the system CAs or ${tls.caFile}` : 'the system CAs (pass --tls-ca FILE or set SVC_TLS_CA to trust a private CA)';
    return refused(`unknown CA: it is not signed by ${trust} (${code})`);
  }
  if (code === 'CERT_HAS_EXPIRED') return refused('the certificate has expired (CERT_HAS_EXPIRED)');
  if (code === 'CERT_NOT_YET_VALID') return refused('the certificate is not valid yet (CERT_NOT_YET_VALID; check the clocks)');
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    let host = err.host;
    try {
      host ??= new URL(url).hostname;
    } catch {
      /* keep undefined */
    }
    return refused(`wrong host: the certificate is not for ${host ?? 'this host'} (${err.reason ?? code})`);
  }
  if (code === 'CERT_REVOKED') return refused('the certificate has been revoked (CERT_REVOKED)');
  if (/^(CERT_|UNABLE_TO_|ERR_TLS_CERT)/.test(code)) return refused(`${err.message} (${code})`);
  if (
    secure &&
    (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || code === 'ERR_SSL_PACKET_LENGTH_TOO_LONG' || /before secure TLS connection was established/.test(err.message))
  ) {
    return {
      message: `TLS handshake with ${url} failed: the server closed the connection or did not answer in TLS (does it serve plain ws://? then use a ws:// URL) (${code || err.message})`,
      verification: false,
    };
  }
  if (code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_')) {
    return { message: `TLS handshake with ${url} failed: ${err.reason ?? err.message} (${code})`, verification: false };
  }
  if (!secure && (code === 'ECONNRESET' || /socket hang up/.test(err.message))) {
    return {
      message: `${url}: the server closed the connection without answering the WebSocket upgrade (if it serves TLS, use a wss:// URL)`,
      verification: false,
    };
  }
  return null;
}
