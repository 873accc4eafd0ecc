/**
 * Diagnostics of the workspace router (`svc-fs-mount status`): which candidate serves each
 * mount and the last failures ({@link describeMounts}), and a live probe of every candidate
 * ({@link probeMounts}). Never shows a token.
 */
import { performance } from 'node:perf_hooks';
import { Errno, FsError } from '@svc/protocol/wire';
import type { EndpointPool } from './endpoint-pool';
import type { MountRoute } from './failover';
import { Attr } from './fs-types';
import { messageOf } from './router-errors';
import { candidateKey, MountCandidate } from './topology';

/** One candidate as reported by {@link describeMounts}. */
export interface CandidateStatus {
  node_id: string | null;
  node_name: string | null;
  export_name: string;
  fs_url: string | null;
  state: MountCandidate['state'];
  selected: boolean;
  /** True for the candidate currently serving the mount. */
  active: boolean;
  /** Whether a token is configured for the hello (never the token itself). */
  auth: boolean;
  /** Last failure of this candidate seen by the router. */
  last_error: string | null;
}

/** One mount path as reported by {@link describeMounts}. */
export interface MountStatus {
  mount_path: string;
  candidates: CandidateStatus[];
}

/** Result of probing one candidate ({@link probeMounts}). */
export interface ProbeResult {
  ok: boolean;
  /** Time for connect (when needed) + exports + getattr of the export root, ms. */
  ms: number;
  /** Export root attributes when ok. */
  root?: Attr;
  read_only?: boolean;
  binary?: boolean;
  node?: string;
  error?: string;
  errno?: number | null;
}

/** Every mount path (sorted) with its candidates, which one is active and the last failures (no secrets). */
export function describeMounts(routes: Iterable<MountRoute>): MountStatus[] {
  const out: MountStatus[] = [];
  for (const route of [...routes].sort((a, b) => (a.mountPath < b.mountPath ? -1 : 1))) {
    out.push({
      mount_path: route.mountPath,
      candidates: route.candidates.map((c) => {
        const key = candidateKey(c);
        return {
          node_id: c.node_id,
          node_name: c.node_name,
          export_name: c.export_name,
          fs_url: c.fs_url,
          state: c.state,
          selected: c.selected,
          active: route.active?.key === key && route.active.session.isOpen,
          auth: typeof c.auth_token === 'string',
          last_error: route.lastError.get(key) ?? null,
        };
      }),
    });
  }
  return out;
}

/**
 * Probes every candidate of `routes`: connect and hello (reusing an open session of `pool`),
 * find the export, getattr its root. Never throws; failures are reported.
 * @returns mount path (sorted) -> one result per candidate, in candidate order
 */
export async function probeMounts(routes: readonly MountRoute[], pool: Pick<EndpointPool, 'get'>): Promise<Map<string, ProbeResult[]>> {
  const out = new Map<string, ProbeResult[]>();
  await Promise.all(
    routes.map(async (route) => {
      out.set(
        route.mountPath,
        await Promise.all(
          route.candidates.map(async (c): Promise<ProbeResult> => {
            const t0 = performance.now();
            try {
              if (!c.fs_url) throw new FsError(Errno.ENODEV, `node ${c.node_id ?? c.node_name} has no fs_url (state ${c.state ?? 'unknown'})`);
              const s = await pool.get(c.fs_url, c.auth_token);
              const ex = await s.export(c.export_name);
              const { attr } = await s.client.request('getattr', { node: ex.root });
              return { ok: true, ms: performance.now() - t0, root: attr, read_only: ex.ro, binary: s.client.binary, node: s.client.hello?.node?.name };
            } catch (e) {
              return { ok: false, ms: performance.now() - t0, error: messageOf(e), errno: e instanceof FsError ? (e.errno ?? null) : null };
            }
          }),
        ),
      );
    }),
  );
  return new Map([...out.entries()].sort(([a], [b]) => (a < b ? -1 : 1)));
}
