/**
 * A real two-node workspace for e2e tests: `svc`, two `svc-fs-node`s in control daemon mode
 * (paired by invite) on temp directories, and a project with mounts
 *   /a      -> node A export work
 *   /b      -> node B export work
 *   /shared -> node A export shared, then node B export shared (a failover group on one directory)
 * Optional terminal exports on node A. With `tls`, `svc` and both nodes serve `wss://` with
 * the given certificates, and every client (the nodes' control sessions, the FS routing inside
 * `svc`, `admin`, `mountArgs`) trusts the given CA through `--tls-ca`.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ClientTls, ControlClient, loadClientTls } from '../../libs/client/src';
import { ADMIN_TOKEN, BIN, cleanupTmp, killAll, Running, startProcess, startSvc, tmpDir, waitFor } from '../support/processes';
import type { CertFiles } from './tls';

/** Certificates of a TLS workspace: the CA clients trust, and each server's certificate. */
export interface WorkspaceTls {
  /** CA certificate (PEM file) given to every client with `--tls-ca`. */
  ca: string;
  svc: CertFiles;
  nodeA: CertFiles;
  nodeB: CertFiles;
}

export interface Workspace {
  svc: Running & { stateDir: string };
  admin: ControlClient;
  nodeA: Running;
  nodeB: Running;
  nodeIds: { a: string; b: string };
  dirs: { a: string; b: string; shared: string };
  project: { project_id: string; project_token: string };
  /** Global options of svc-fs-mount for this workspace (workspace mode, admin token). */
  mountArgs: string[];
  /** The client trust of a TLS workspace (for ControlClient/FsClient `tls`); undefined without TLS. */
  tls?: ClientTls;
  close(): void;
}

/** Starts a paired daemon node; resolves once its catalog record is published. */
async function daemonNode(
  admin: ControlClient,
  svcUrl: string,
  name: string,
  exports: string[],
  extra: string[],
  tls?: { ca: string; cert: CertFiles },
): Promise<{ node: Running; nodeId: string }> {
  const { invite_token } = await admin.request<{ invite_token: string }>('node_invite_create');
  const stateFile = join(tmpDir('node-state-'), 'state.json');
  const args = [
    '--port',
    '0',
    '--control-url',
    svcUrl,
    '--invite-token',
    invite_token,
    '--node-name',
    name,
    '--state-file',
    stateFile,
    '--refresh-interval-ms',
    '1000',
    '--reconnect-backoff-ms',
    '200',
  ];
  for (const e of exports) args.push('--export', e);
  if (tls) args.push('--tls-cert', tls.cert.cert, '--tls-key', tls.cert.key, '--tls-ca', tls.ca);
  const node = await startProcess(BIN.fsNode, [...args, ...extra], { SVC_AUTH_TOKEN: ADMIN_TOKEN, SVC_LOG_LEVEL: 'warn' });
  const nodeId = await waitFor(async () => {
    const { nodes } = await admin.request<{ nodes: Array<{ node_id: string; node_name: string }> }>('node_list');
    const n = nodes.find((x) => x.node_name === name);
    if (!n) return undefined;
    const { services } = await admin.request<{ services: unknown[] }>('node_service_get', { node_id: n.node_id });
    return services.length > 0 ? n.node_id : undefined;
  }, 15_000);
  return { node, nodeId };
}

/** Builds the workspace described in the module documentation. */
export async function startWorkspace(options: { terminalIds?: string[]; manifests?: string[]; tls?: WorkspaceTls } = {}): Promise<Workspace> {
  const t = options.tls;
  const svc = await startSvc({ env: { SVC_LOG_LEVEL: 'warn' }, args: t ? ['--tls-cert', t.svc.cert, '--tls-key', t.svc.key, '--tls-ca', t.ca] : [] });
  const tls = t ? loadClientTls(t.ca) : undefined;
  const admin = await ControlClient.connect({ url: svc.url, token: ADMIN_TOKEN, tls });
  const root = tmpDir('workspace-');
  const dirs = { a: join(root, 'a'), b: join(root, 'b'), shared: join(root, 'shared') };
  for (const d of Object.values(dirs)) mkdirSync(d);
  const extraA = [
    ...(options.terminalIds ?? []).flatMap((id) => ['--terminal-id', id]),
    ...(options.manifests ?? []).flatMap((m) => ['--service-manifest', m]),
  ];
  const A = await daemonNode(admin, svc.url, 'node-a', [`work=${dirs.a}`, `shared=${dirs.shared}`], extraA, t && { ca: t.ca, cert: t.nodeA });
  const B = await daemonNode(admin, svc.url, 'node-b', [`work=${dirs.b}`, `shared=${dirs.shared}`], [], t && { ca: t.ca, cert: t.nodeB });
  const project = await admin.request<{ project_id: string; project_token: string }>('project_create', { name: 'ws', access_policy: { invoke: 'allow' } });
  const mounts: Array<[string, string, string]> = [
    ['/a', A.nodeId, 'work'],
    ['/b', B.nodeId, 'work'],
    ['/shared', A.nodeId, 'shared'],
    ['/shared', B.nodeId, 'shared'],
    ...(options.terminalIds ?? []).map((id) => [`/term/${id}`, A.nodeId, `terminal-${id}`] as [string, string, string]),
  ];
  for (const [mount_path, node_id, export_name] of mounts) {
    await admin.request('project_mount_set', { project_id: project.project_id, node_id, export_name, mount_path });
  }
  return {
    svc,
    admin,
    nodeA: A.node,
    nodeB: B.node,
    nodeIds: { a: A.nodeId, b: B.nodeId },
    dirs,
    project,
    mountArgs: [
      '--workspace-url',
      svc.url,
      '--auth-token',
      ADMIN_TOKEN,
      '--project-id',
      project.project_id,
      '--project-token',
      project.project_token,
      ...(t ? ['--tls-ca', t.ca] : []),
    ],
    tls,
    close: () => admin.close(),
  };
}

/**
 * Starts a workspace ({@link startWorkspace} with `options`) before the tests of the file (or
 * `describe` block) this is called in, within `timeoutMs`; after them, closes its admin session,
 * stops every process the helpers started and removes their temporary directories.
 * @returns the workspace, its fields set once it has started (read them in the tests, not when the file loads)
 */
export function useWorkspace(options: Parameters<typeof startWorkspace>[0] = {}, timeoutMs = 60_000): Workspace {
  const ws = {} as Workspace;
  beforeAll(async () => {
    Object.assign(ws, await startWorkspace(options));
  }, timeoutMs);
  afterAll(async () => {
    ws.close?.();
    await killAll();
    cleanupTmp();
  });
  return ws;
}
