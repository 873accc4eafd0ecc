/**
 * Throwaway certificates for the TLS rows of the benches (docs/operations.md "Transport security (TLS)"): a CA
 * and one server certificate for 127.0.0.1 and localhost (EC P-256, as an operator following
 * docs/operations.md would make them), made with the `openssl` command line.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** PEM files of a bench server: its certificate and key, and the CA clients pass to `--tls-ca`. */
export interface BenchTls {
  ca: string;
  cert: string;
  key: string;
}

/**
 * Makes a CA and a server certificate in `dir` (created).
 * @returns the files, or a sentence saying why not (no `openssl`, or it failed)
 */
export function makeBenchTls(dir: string): BenchTls | string {
  const version = spawnSync('openssl', ['version'], { encoding: 'utf8' });
  if (version.status !== 0) return `openssl is not installed (${version.error?.message ?? `exit ${version.status}`})`;
  mkdirSync(dir, { recursive: true });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  writeFileSync(join(dir, 'server.ext'), 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n');
  for (const args of [
    ['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=svc bench CA'],
    ['req', '-new', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1'],
    ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2', '-extfile', 'server.ext', '-out', 'server.pem'],
  ]) {
    const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    if (r.status !== 0) return `openssl ${args[0]} failed: ${r.stderr.trim()}`;
  }
  return { ca: join(dir, 'ca.pem'), cert: join(dir, 'server.pem'), key: join(dir, 'server.key') };
}
