/**
 * Transport security settings shared by the server programs (`svc`, `svc-fs-node`;
 * docs/operations.md "Transport security (TLS)"): which certificate and key files to serve, and the rule that
 * a listener reachable from other hosts speaks TLS unless `--insecure-transport` says
 * otherwise. Only Node built-ins here, so a program's configuration can load it cheaply.
 */

/** The PEM files a TLS listener serves (paths as given, resolved by the caller). */
export interface ServerTlsFiles {
  /** Certificate chain, PEM: the server certificate first, then any intermediates. */
  certFile: string;
  /** Private key of the certificate, PEM (unencrypted). */
  keyFile: string;
}

/** What {@link resolveTransportSecurity} decided. */
export interface TransportSecurity {
  /** The files to serve TLS with; null: plain WebSocket (`ws://`). */
  tls: ServerTlsFiles | null;
  /**
   * True when the listener is reachable from other hosts without TLS because the operator
   * passed `--insecure-transport`: the program warns at start.
   */
  insecure: boolean;
}

type ErrorType = new (message: string) => Error;

/**
 * True for an address only this host can reach: `localhost`, 127.0.0.0/8, `::1` (also written
 * `[::1]`, or as the IPv4-mapped `::ffff:127.x.y.z`). Everything else, host names included, is
 * taken as reachable from other hosts.
 */
export function isLoopbackBind(bind: string): boolean {
  const b = bind.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (b === 'localhost' || b === '::1' || b === '0:0:0:0:0:0:0:1') return true;
  return /^(::ffff:)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(b);
}

/**
 * Decides a server's transport security from its flags and environment (docs/protocol.md "Transport"):
 * `--tls-cert`/`--tls-key` (else `SVC_TLS_CERT`/`SVC_TLS_KEY`) give TLS; a `--bind` outside
 * loopback ({@link isLoopbackBind}) without them is refused unless `--insecure-transport`.
 * @param flags the parsed flags (undefined when not given)
 * @param env the environment (`SVC_TLS_CERT`, `SVC_TLS_KEY`; empty values count as unset)
 * @param Err the program's configuration error type (exit code 2)
 * @throws Err when only one of certificate and key is given, or when the bind address is not
 *   loopback and neither TLS nor `--insecure-transport` is given (the message says what to pass)
 */
export function resolveTransportSecurity(
  flags: { bind: string; tlsCert?: string; tlsKey?: string; insecureTransport?: boolean },
  env: NodeJS.ProcessEnv,
  Err: ErrorType,
): TransportSecurity {
  const pick = (flag: string | undefined, name: string, variable: string): string | null => {
    if (flag !== undefined) {
      if (flag === '') throw new Err(`${name} must not be empty`);
      return flag;
    }
    const v = env[variable];
    return v === undefined || v === '' ? null : v;
  };
  const certFile = pick(flags.tlsCert, '--tls-cert', 'SVC_TLS_CERT');
  const keyFile = pick(flags.tlsKey, '--tls-key', 'SVC_TLS_KEY');
  if ((certFile === null) !== (keyFile === null)) {
    throw new Err(
      certFile === null
        ? '--tls-key (or SVC_TLS_KEY) needs --tls-cert FILE (or SVC_TLS_CERT): the certificate the key belongs to'
        : '--tls-cert (or SVC_TLS_CERT) needs --tls-key FILE (or SVC_TLS_KEY): the private key of the certificate',
    );
  }
  if (certFile !== null && keyFile !== null) return { tls: { certFile, keyFile }, insecure: false };
  if (isLoopbackBind(flags.bind)) return { tls: null, insecure: false };
  if (flags.insecureTransport) return { tls: null, insecure: true };
  throw new Err(
    `--bind ${flags.bind} is reachable from other hosts, and without TLS role tokens, FS tokens and file contents would cross the network in clear: ` +
      'pass --tls-cert FILE --tls-key FILE (or set SVC_TLS_CERT and SVC_TLS_KEY) to serve wss://, ' +
      'or --insecure-transport to serve plain ws:// anyway (only on a network you trust, e.g. behind a TLS-terminating proxy)',
  );
}

/** The warning an insecure listener logs at start (and prints on stderr). */
export function insecureTransportWarning(url: string): string {
  return `--insecure-transport: ${url} is reachable from other hosts without TLS; role tokens, FS tokens and file contents cross the network in clear`;
}
