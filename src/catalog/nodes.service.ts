/**
 * Nodes: invites, joins (by invite or by approved request), leases, listing and deletion
 * (docs/protocol.md "Nodes"). Node secrets, invite tokens and request secrets are
 * returned once and stored only as SHA-256 digests; credentials approved but not yet fetched
 * are stored sealed to the request secret (see sealed-credentials.ts).
 */
import { Injectable } from '@nestjs/common';
import {
  fail,
  INVITE_TTL_DEFAULT_MS,
  LEASE_TTL_DEFAULT_MS,
  matchesDigest,
  newId,
  newSecret,
  NodeCredentials,
  NodeInfo,
  NodeJoinDto,
  NodeJoinRequestDto,
  PendingJoin,
  LeaseRefreshDto,
  Platform,
  ProtocolError,
  sha256Hex,
} from '@svc/protocol';
import { DaemonSessionRecord, JoinRequestRecord, nodeIsOnline, NodeRecord } from '../persistence/state.model';
import { StateDraft } from '../persistence/state.draft';
import { openCredentials, sealCredentials, sealPublicKey } from './sealed-credentials';
import { StateService } from '../persistence/state.service';
import { Clock } from '../common/clock';

/** Invites and decided join requests are kept this long after they end, ms (to answer `invite_redeemed`/`denied`). */
const RETAIN_ENDED_MS = 24 * 3_600_000;

function platformOf(p: Platform | undefined): Platform {
  const out: Platform = {};
  if (p?.os !== undefined) out.os = p.os;
  if (p?.arch !== undefined) out.arch = p.arch;
  if (p?.runtime_kind !== undefined) out.runtime_kind = p.runtime_kind;
  return out;
}

/** The NodeCredentials of `node` (docs/protocol.md "Nodes") with its node secret in clear, which only the digest of is stored. */
function credentialsOf(node: NodeRecord, nodeSecret: string): NodeCredentials {
  return {
    node_id: node.node_id,
    node_name: node.node_name,
    node_secret: nodeSecret,
    fs_auth_token: node.fs_auth_token,
    lease_token: node.lease_token,
    lease_expires_at_ms: node.lease_expires_at_ms,
  };
}

@Injectable()
export class NodesService {
  constructor(
    private readonly store: StateService,
    private readonly clock: Clock,
  ) {}

  /** NodeInfo of a node record (docs/protocol.md "Nodes"); no secrets. */
  info(node: NodeRecord, now = this.clock.now()): NodeInfo {
    const online = nodeIsOnline(node, now);
    return {
      node_id: node.node_id,
      node_name: node.node_name,
      fs_url: node.fs_url,
      platform: node.platform,
      labels: node.labels,
      joined_at_ms: node.joined_at_ms,
      last_seen_ms: node.last_seen_ms,
      lease_expires_at_ms: node.lease_expires_at_ms,
      state: online ? 'online' : 'degraded',
      online,
    };
  }

  /** All nodes, by name then id. */
  list(): NodeInfo[] {
    const now = this.clock.now();
    return [...this.store.state.nodes.values()]
      .sort((a, b) => a.node_name.localeCompare(b.node_name) || a.node_id.localeCompare(b.node_id))
      .map((n) => this.info(n, now));
  }

  /** The record of a node as last committed, or undefined. */
  peek(nodeId: string): NodeRecord | undefined {
    return this.store.state.nodes.get(nodeId);
  }

  /**
   * @throws ProtocolError `node_not_found`
   */
  get(nodeId: string): NodeInfo {
    const node = this.store.state.nodes.get(nodeId);
    if (!node) fail('node_not_found', `node ${nodeId} not found`);
    return this.info(node);
  }

  /**
   * Creates a single-use invite.
   * @param ttlMs lifetime, ms (default 1 h)
   * @returns `{invite_token, expires_at_ms}`; the token is shown only here
   */
  async createInvite(ttlMs = INVITE_TTL_DEFAULT_MS): Promise<{ invite_token: string; expires_at_ms: number }> {
    const token = newSecret();
    const digest = sha256Hex(token);
    return this.store.mutate((s) => {
      const now = this.clock.now();
      this.prune(s, now);
      const expires = now + ttlMs;
      s.invites.put({ invite_sha256: digest, created_at_ms: now, expires_at_ms: expires, redeemed_at_ms: null, node_id: null });
      return { invite_token: token, expires_at_ms: expires };
    });
  }

  /**
   * Redeems an invite and creates the node.
   * @throws ProtocolError `invite_not_found`, `invite_expired`, `invite_redeemed`
   */
  async join(input: NodeJoinDto): Promise<NodeCredentials> {
    const digest = sha256Hex(input.invite_token);
    return this.store.mutate((s) => {
      const now = this.clock.now();
      const invite = s.invites.get(digest);
      if (!invite) fail('invite_not_found', 'invite_token is not a known invite');
      if (invite.redeemed_at_ms !== null) fail('invite_redeemed', 'this invite was already used; ask an admin for a new one (control.node_invite_create)');
      if (invite.expires_at_ms <= now) fail('invite_expired', 'this invite has expired; ask an admin for a new one (control.node_invite_create)');
      const { node, credentials } = this.createNode(
        s,
        input.node_name,
        input.fs_url,
        platformOf(input.platform),
        input.lease_ttl_ms ?? LEASE_TTL_DEFAULT_MS,
        now,
      );
      s.invites.put({ ...invite, redeemed_at_ms: now, node_id: node.node_id });
      return credentials;
    });
  }

  /** Files a join request; the node then polls {@link joinStatus} with the returned secret. */
  async joinRequest(input: NodeJoinRequestDto): Promise<{
    request_id: string;
    request_secret: string;
    node_name: string;
    fs_url: string;
    platform: Platform;
    requested_at_ms: number;
  }> {
    const secret = newSecret();
    const requestId = newId('join');
    const sealKey = sealPublicKey(secret, requestId);
    return this.store.mutate((s) => {
      const now = this.clock.now();
      this.prune(s, now);
      const rec: JoinRequestRecord = {
        request_id: requestId,
        request_secret_sha256: sha256Hex(secret),
        seal_public_key: sealKey,
        node_name: input.node_name,
        fs_url: input.fs_url,
        platform: platformOf(input.platform),
        requested_at_ms: now,
        state: 'pending',
        decided_at_ms: null,
        node_id: null,
        delivered: false,
      };
      s.joinRequests.put(rec);
      return { request_id: requestId, request_secret: secret, node_name: rec.node_name, fs_url: rec.fs_url, platform: rec.platform, requested_at_ms: now };
    });
  }

  /**
   * State of a join request; the credentials are returned once, on the first call after
   * approval: those of the approval, opened with the request secret (or, for a request
   * approved before an import, with a new node secret).
   * @throws ProtocolError `pending_join_not_found` (unknown id or wrong secret: indistinguishable)
   */
  async joinStatus(requestId: string, secret: string): Promise<{ state: JoinRequestRecord['state']; request_id: string; credentials?: NodeCredentials }> {
    let rec = this.store.state.joinRequests.get(requestId);
    if (!rec || (rec.state === 'pending' && rec.node_id === null)) {
      // filed or decided through another replica a moment ago
      await this.store.refresh();
      rec = this.store.state.joinRequests.get(requestId);
    }
    if (!rec || !matchesDigest(secret, rec.request_secret_sha256)) {
      fail('pending_join_not_found', `join request ${requestId} not found (or request_secret does not match)`);
    }
    if (rec.state !== 'approved' || rec.delivered) return { state: rec.state, request_id: requestId };
    return this.store.mutate((s) => {
      const r = s.joinRequests.get(requestId);
      const node = r?.node_id ? s.nodes.get(r.node_id) : undefined;
      if (!r || !node) fail('pending_join_not_found', `join request ${requestId} was approved but its node has since been deleted; file a new request`);
      if (r.delivered) return { state: r.state, request_id: requestId };
      const sealed = s.undelivered.get(requestId);
      const opened = sealed ? openCredentials(sealed.sealed, secret, requestId) : null;
      let credentials = opened ? (JSON.parse(opened) as NodeCredentials) : null;
      if (!credentials || credentials.node_id !== node.node_id) {
        // No sealed credentials for this node (imported from an earlier version): issue a new secret.
        const nodeSecret = newSecret();
        s.nodes.put({ ...node, secret_sha256: sha256Hex(nodeSecret) });
        credentials = credentialsOf(node, nodeSecret);
      }
      s.joinRequests.put({ ...r, delivered: true });
      s.undelivered.delete(requestId);
      return { state: r.state, request_id: requestId, credentials };
    });
  }

  /** Pending join requests, oldest first (no secrets). */
  pendingList(): { pending: PendingJoin[] } {
    const pending = [...this.store.state.joinRequests.values()]
      .filter((r) => r.state === 'pending')
      .sort((a, b) => a.requested_at_ms - b.requested_at_ms)
      .map((r) => ({ request_id: r.request_id, node_name: r.node_name, fs_url: r.fs_url, platform: r.platform, requested_at_ms: r.requested_at_ms }));
    return { pending };
  }

  /**
   * Approves a pending request: creates the node and returns its credentials (also delivered
   * once to the node through {@link joinStatus}, sealed to its request secret meanwhile).
   * @throws ProtocolError `pending_join_not_found` when unknown or already decided
   */
  async approve(requestId: string, leaseTtlMs = LEASE_TTL_DEFAULT_MS): Promise<NodeCredentials> {
    return this.store.mutate((s) => {
      const now = this.clock.now();
      const r = this.pending(s, requestId);
      const { node, credentials } = this.createNode(s, r.node_name, r.fs_url, r.platform, leaseTtlMs, now);
      s.joinRequests.put({ ...r, state: 'approved', decided_at_ms: now, node_id: node.node_id });
      if (r.seal_public_key) s.undelivered.put({ request_id: requestId, sealed: sealCredentials(JSON.stringify(credentials), r.seal_public_key, requestId) });
      return credentials;
    });
  }

  /**
   * Denies a pending request; the node's next status poll says `denied`.
   * @throws ProtocolError `pending_join_not_found`
   */
  async deny(requestId: string): Promise<{ denied: true; request_id: string }> {
    return this.store.mutate((s) => {
      const r = this.pending(s, requestId);
      s.joinRequests.put({ ...r, state: 'denied', decided_at_ms: this.clock.now() });
      return { denied: true as const, request_id: requestId };
    });
  }

  /**
   * Extends a node's lease; optionally updates its advertised `fs_url` and FS auth token.
   * @param daemon the caller's session when it is the node's daemon session (docs/protocol.md "Liveness from daemon sessions"):
   *   recorded as open in the same write when it is not already (a new or reconnected daemon);
   *   null: a refresh by hand, which leaves an open daemon session alone and forgets a closed
   *   one (the node is then judged by its lease)
   * @throws ProtocolError `node_not_found`, `node_auth_failed`
   */
  async refreshLease(
    input: LeaseRefreshDto,
    daemon: Pick<DaemonSessionRecord, 'session_id' | 'replica'> | null = null,
  ): Promise<{ node_id: string; lease_token: string; lease_expires_at_ms: number }> {
    await this.authenticateFresh(input.node_id, input.node_secret);
    const leaseToken = newSecret();
    return this.store.mutate((s) => {
      const node = s.nodes.get(input.node_id);
      if (!node) fail('node_not_found', `node ${input.node_id} not found; pair again`);
      const now = this.clock.now();
      const { daemon_session: known, ...rest } = node;
      let session = known ?? null;
      if (daemon && (known?.session_id !== daemon.session_id || known.closed_at_ms !== null)) {
        session = { session_id: daemon.session_id, replica: daemon.replica, opened_at_ms: now, closed_at_ms: null };
      } else if (!daemon && known && known.closed_at_ms !== null) session = null;
      const next = s.nodes.put({
        ...rest,
        ...(session ? { daemon_session: session } : {}),
        lease_token: leaseToken,
        lease_expires_at_ms: now + (input.lease_ttl_ms ?? LEASE_TTL_DEFAULT_MS),
        last_seen_ms: now,
        fs_url: input.fs_url ?? node.fs_url,
        fs_auth_token: input.fs_auth_token ?? node.fs_auth_token,
      });
      return { node_id: next.node_id, lease_token: next.lease_token, lease_expires_at_ms: next.lease_expires_at_ms };
    });
  }

  /**
   * `control.node_lease_release` (docs/protocol.md "Nodes"): the lease ends now, so the node's mounts
   * turn `degraded` and fail over at once (a node stopping cleanly calls it).
   * @throws ProtocolError `node_not_found`, `node_auth_failed`
   */
  async releaseLease(nodeId: string, secret: string): Promise<{ node_id: string; released: true; lease_expires_at_ms: number }> {
    await this.authenticateFresh(nodeId, secret);
    return this.store.mutate((s) => {
      const node = s.nodes.get(nodeId);
      if (!node) fail('node_not_found', `node ${nodeId} not found`);
      const now = this.clock.now();
      const expires = Math.min(node.lease_expires_at_ms, now);
      // a released lease ends the daemon's session too: its close then changes nothing
      const { daemon_session: _ended, ...rest } = node;
      s.nodes.put({ ...rest, lease_expires_at_ms: expires, last_seen_ms: now });
      return { node_id: nodeId, released: true as const, lease_expires_at_ms: expires };
    });
  }

  /**
   * Records that a node daemon's session closed without a lease release (docs/protocol.md "Liveness from daemon sessions"), so
   * that the node is `degraded` on every replica; nothing when the stored session is another
   * one (the daemon reconnected meanwhile) or no longer open.
   * @param closedAtMs when the session closed, epoch ms
   * @returns whether the node was marked
   * @throws ProtocolError `unavailable` / `internal_error` when it could not be stored
   */
  async closeDaemonSession(nodeId: string, sessionId: string, closedAtMs: number): Promise<boolean> {
    return this.store.mutate((s) => {
      const node = s.nodes.get(nodeId);
      const known = node?.daemon_session;
      if (!node || !known || known.session_id !== sessionId || known.closed_at_ms !== null) return false;
      s.nodes.put({ ...node, daemon_session: { ...known, closed_at_ms: closedAtMs } });
      return true;
    });
  }

  /**
   * {@link authenticate}, looking again after catching up with other replicas when the node
   * or its secret is not known here yet (a node paired or re-paired through another replica).
   * @throws ProtocolError `node_not_found`, `node_auth_failed`
   */
  async authenticateFresh(nodeId: string, secret: string): Promise<NodeRecord> {
    try {
      return this.authenticate(nodeId, secret);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      await this.store.refresh();
      return this.authenticate(nodeId, secret);
    }
  }

  /**
   * Checks a node's secret (constant time).
   * @throws ProtocolError `node_not_found`, `node_auth_failed`
   */
  authenticate(nodeId: string, secret: string): NodeRecord {
    const node = this.store.state.nodes.get(nodeId);
    if (!node) fail('node_not_found', `node ${nodeId} not found; pair again`);
    if (!matchesDigest(secret, node.secret_sha256)) fail('node_auth_failed', `node_secret does not match node ${nodeId}`);
    return node;
  }

  /**
   * Deletes a node and its catalog record. Mounts that name it become `missing`.
   * @throws ProtocolError `node_not_found`
   */
  async delete(nodeId: string): Promise<{ deleted: true; node_id: string }> {
    return this.store.mutate((s) => {
      if (!s.nodes.delete(nodeId)) fail('node_not_found', `node ${nodeId} not found`);
      s.catalog.delete(nodeId);
      return { deleted: true as const, node_id: nodeId };
    });
  }

  private pending(s: StateDraft, requestId: string): JoinRequestRecord {
    const r = s.joinRequests.get(requestId);
    if (!r) fail('pending_join_not_found', `join request ${requestId} not found`);
    if (r.state !== 'pending') fail('pending_join_not_found', `join request ${requestId} was already ${r.state}`);
    return r;
  }

  private createNode(
    s: StateDraft,
    nodeName: string,
    fsUrl: string,
    platform: Platform,
    leaseTtlMs: number,
    now: number,
  ): { node: NodeRecord; credentials: NodeCredentials } {
    const nodeSecret = newSecret();
    const node: NodeRecord = {
      node_id: newId('node'),
      node_name: nodeName,
      fs_url: fsUrl,
      platform,
      labels: {},
      secret_sha256: sha256Hex(nodeSecret),
      fs_auth_token: newSecret(),
      lease_token: newSecret(),
      lease_expires_at_ms: now + leaseTtlMs,
      joined_at_ms: now,
      last_seen_ms: now,
    };
    if (s.nodes.has(node.node_id)) throw new ProtocolError('internal_error', 'node id collision; retry');
    s.nodes.put(node);
    return { node, credentials: credentialsOf(node, nodeSecret) };
  }

  /** Drops invites and decided requests that ended more than a day ago (and unfetched credentials with them). */
  private prune(s: StateDraft, now: number): void {
    for (const inv of s.invites.values()) {
      const ended = inv.redeemed_at_ms ?? inv.expires_at_ms;
      if (ended + RETAIN_ENDED_MS < now) s.invites.delete(inv.invite_sha256);
    }
    for (const r of s.joinRequests.values()) {
      if (r.state !== 'pending' && (r.decided_at_ms ?? 0) + RETAIN_ENDED_MS < now) {
        s.joinRequests.delete(r.request_id);
        s.undelivered.delete(r.request_id);
      }
    }
  }
}
