/**
 * `svc-fs-mount mount --metrics-port N`: the mount's figures as Prometheus text on
 * `http://HOST:N/metrics` (prom-client, a registry of its own): the kernel inodes the mount
 * holds, open files, requests being answered, requests answered by operation, kernel
 * invalidations sent, and the process's own figures (RSS, CPU, event-loop lag).
 */
import { createServer, Server } from 'node:http';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { FuseFs } from '../../../libs/fs/src/fuse/fuse-fs';

/** The registry of one mount's metrics, read from `fs` at each scrape. */
export function mountRegistry(fs: Pick<FuseFs, 'stats'>): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  new Gauge({
    name: 'svc_fuse_inodes',
    help: 'Kernel inodes the mount holds (lookup count above zero), the root included',
    registers: [registry],
    collect() {
      this.set(fs.stats().inodes);
    },
  });
  new Gauge({
    name: 'svc_fuse_open_files',
    help: 'Open FUSE file handles',
    registers: [registry],
    collect() {
      this.set(fs.stats().openFiles);
    },
  });
  new Gauge({
    name: 'svc_fuse_requests_pending',
    help: 'Kernel requests being answered',
    registers: [registry],
    collect() {
      this.set(fs.stats().pendingRequests);
    },
  });
  new Counter({
    name: 'svc_fuse_requests_total',
    help: 'Kernel requests answered, by operation',
    labelNames: ['op'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [op, n] of fs.stats().requests) this.inc({ op }, n);
    },
  });
  new Counter({
    name: 'svc_fuse_fast_opens_total',
    help: 'Read-only opens answered by the libfuse binding without a request reaching the mount process (files whose content the mount knows to be current)',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(fs.stats().fastOpens);
    },
  });
  new Counter({
    name: 'svc_fuse_fast_getattrs_total',
    help: "Getattrs of directories answered by the libfuse binding without a request reaching the mount process (the attributes a change of the directory's entries just returned)",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(fs.stats().fastGetattrs);
    },
  });
  new Counter({
    name: 'svc_fuse_invalidations_total',
    help: 'Kernel cache invalidations sent: inode (attributes and pages) or entry (a name)',
    labelNames: ['kind'],
    registers: [registry],
    collect() {
      this.reset();
      const { inode, entry } = fs.stats().invalidations;
      this.inc({ kind: 'inode' }, inode);
      this.inc({ kind: 'entry' }, entry);
    },
  });
  return registry;
}

/**
 * Serves `registry` on `http://host:port/metrics` (other paths: 404).
 * @returns the listening server
 * @throws Error when the port cannot be listened on (in use, not allowed)
 */
export function serveMetrics(registry: Registry, port: number, host = '127.0.0.1'): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (e: unknown) => res.writeHead(500).end(String(e)),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}
