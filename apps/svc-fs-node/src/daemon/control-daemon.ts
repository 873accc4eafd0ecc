/**
 * Control daemon mode of `svc-fs-node` (`--control-url`): pairs the node with
 * the control plane (by invite or by approved request), keeps its lease, publishes its catalog
 * record after pairing and after every reconnect, and re-publishes when `--services-dir`
 * changes. The FS server keeps serving throughout; the control plane being unreachable only
 * means retries with exponential backoff and jitter. A clean stop releases the lease
 * (`control.node_lease_release`, docs/protocol.md "Nodes") so the node's mounts fail over at once.
 */
import { Logger } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import { watch, FSWatcher } from 'node:fs';
import { ConnectionError, ControlClient, ControlError } from '@svc/client';
import { NODE_DAEMON_AGENT_ID, NodeCredentials } from '@svc/protocol';
import { Backoff, sleep } from './backoff';
import { buildServices, builtInServiceIds, loadManifests, ManifestError, nodePlatform } from './catalog-record';
import { NodeStateData, NodeStateFile } from './node-state';
import type { DaemonConfig } from '../config';

/**
 * Daemon settings: the command line's daemon flags (docs/programs.md "svc-fs-node"), plus what the
 * program resolves once its FS listener is up.
 */
export type DaemonOptions = Omit<DaemonConfig, 'fsUrl'> & {
  nodeName: string;
  /** The FS URL advertised to the control plane. */
  fsUrl: string;
  /** `--auth-token`: the FS token to serve with and to report, instead of the paired one. */
  fixedFsAuthToken: string | null;
  /** `--terminal-id` values. */
  terminalIds: string[];
};

/** What the daemon needs from the FS server it runs beside. */
export interface DaemonHost {
  /** Exports served (name, read-only). */
  exports(): Array<{ name: string; ro: boolean }>;
  /** The token FS sessions must present; null refuses every session (not paired yet). */
  setFsAuthToken(token: string | null): void;
}

/** A condition the daemon cannot recover from by retrying; the program exits 3 with the message. */
export class DaemonFatal extends Error {}

/** How long a clean stop tries to release the lease before giving up, ms. */
export const LEASE_RELEASE_TIMEOUT_MS = 2000;

/** Options of {@link ControlDaemon.stop}. */
export interface DaemonStopOptions {
  /**
   * Release the lease before closing the control session (`control.node_lease_release`,
   * docs/protocol.md "Nodes"), so the node's mounts turn `degraded` and fail over now rather than when
   * the lease expires. Default false.
   */
  releaseLease?: boolean;
  /** Give up releasing after this long, ms (default {@link LEASE_RELEASE_TIMEOUT_MS}). */
  releaseTimeoutMs?: number;
}

/** Outcome of a lease release attempt (the `released` event). */
export type LeaseReleaseOutcome = { released: true; node_id: string; lease_expires_at_ms: number } | { released: false; node_id: string; reason: string };

/**
 * Events: `paired` (credentials without secrets: `{node_id, node_name}`), `lease`
 * (`lease_expires_at_ms`), `published` (service ids), `released` ({@link LeaseReleaseOutcome},
 * on a stop that releases the lease), `fatal` (DaemonFatal).
 */
export class ControlDaemon extends EventEmitter {
  private readonly logger = new Logger('ControlDaemon');
  private readonly stateFile: NodeStateFile;
  private state: NodeStateData;
  private readonly stop$ = new AbortController();
  private client: ControlClient | null = null;
  private servicesWatcher: FSWatcher | null = null;
  private republish: NodeJS.Timeout | null = null;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly options: DaemonOptions,
    private readonly host: DaemonHost,
  ) {
    super();
    this.stateFile = new NodeStateFile(options.stateFile);
  }

  /**
   * Loads the state file and starts the background loop. Serves FS with the saved credentials'
   * token (or `--auth-token`) at once, before the control plane is reached.
   * @throws NodeStateError when the state file is unreadable
   */
  async start(): Promise<void> {
    const saved = await this.stateFile.load();
    this.state = saved ?? { control_url: this.options.controlUrl, credentials: null, pending_request: null, updated_at_ms: Date.now() };
    if (saved && saved.control_url !== this.options.controlUrl) {
      this.logger.warn({ msg: `state file belongs to ${saved.control_url}; pairing with ${this.options.controlUrl} instead` });
      this.state = { control_url: this.options.controlUrl, credentials: null, pending_request: null, updated_at_ms: Date.now() };
    }
    this.applyFsToken();
    if (this.options.servicesDir) this.watchServicesDir(this.options.servicesDir);
    this.loop = this.run().catch((e) => {
      this.emit('fatal', e instanceof DaemonFatal ? e : new DaemonFatal((e as Error).message));
    });
  }

  /**
   * Stops the loop and closes the control session. With `releaseLease` (a clean shutdown,
   * SIGTERM/SIGINT) it first lets a lease refresh in flight finish (so it cannot land after
   * the release and extend the lease again), then calls `control.node_lease_release`
   * `{node_id, node_secret}` (docs/protocol.md "Nodes") on the open session, or on a new one when there
   * is none. The whole release is bounded by `releaseTimeoutMs` (default 2000 ms); a release
   * that fails or times out (svc down or not answering, node deleted, `node_auth_failed`, a
   * server without the operation) is logged as a warning and otherwise ignored: the lease then
   * simply expires. Not paired yet: nothing to release. Never throws; nothing secret is logged.
   * @returns when the session is closed; with `releaseLease`, at most about `releaseTimeoutMs`
   *   after the call
   */
  async stop(options: DaemonStopOptions = {}): Promise<void> {
    const timeoutMs = options.releaseTimeoutMs ?? LEASE_RELEASE_TIMEOUT_MS;
    const deadline = Date.now() + timeoutMs;
    this.stop$.abort();
    this.servicesWatcher?.close();
    if (this.republish) clearTimeout(this.republish);
    if (!options.releaseLease) {
      this.client?.close();
      await this.loop;
      // The loop may have finished connecting after the abort; that session is not used.
      this.client?.close();
      this.client = null;
      return;
    }
    // The loop ends at its next step; it leaves an open session in place for the release.
    const settled = await beforeDeadline(this.loop ?? Promise.resolve(), deadline);
    await this.releaseLease(deadline, timeoutMs, settled);
    this.client?.close();
    this.client = null;
    // A loop still waiting on a reply ends with the closed session; do not wait past the deadline.
    await beforeDeadline(this.loop ?? Promise.resolve(), deadline);
  }

  /** The node id once paired. */
  get nodeId(): string | null {
    return this.state?.credentials?.node_id ?? null;
  }

  /**
   * Calls `control.node_lease_release` before `deadline` and logs the outcome (emitting
   * `released`). Never throws.
   * @param settled whether the background loop has ended (no refresh in flight)
   */
  private async releaseLease(deadline: number, timeoutMs: number, settled: boolean): Promise<void> {
    const creds = this.state?.credentials;
    if (!creds) return;
    const nodeId = creds.node_id;
    const fail = (reason: string) => {
      this.logger.warn({ msg: `lease release failed (${reason}); the node's mounts turn degraded when its lease expires`, node_id: nodeId });
      this.emit('released', { released: false, node_id: nodeId, reason } satisfies LeaseReleaseOutcome);
    };
    if (!settled) return fail(`a lease refresh got no reply within ${timeoutMs} ms; gave up`);
    const remaining = () => Math.max(1, deadline - Date.now());
    try {
      let client = this.client?.isOpen ? this.client : null;
      if (!client) {
        let gaveUp = false;
        const connecting = ControlClient.connect({
          url: this.options.controlUrl,
          token: this.options.controlAuthToken,
          agentId: NODE_DAEMON_AGENT_ID,
          tls: this.options.tls,
          connectTimeoutMs: remaining(),
          requestTimeoutMs: remaining(),
        });
        // A session that opens only after the deadline is closed at once.
        connecting.then(
          (c) => gaveUp && c.close(),
          () => undefined,
        );
        try {
          client = await withinDeadline(connecting, deadline, timeoutMs);
        } catch (e) {
          gaveUp = true;
          throw e;
        }
        this.client = client;
      }
      const r = await withinDeadline(
        client.request<{ lease_expires_at_ms: number }>('node_lease_release', this.payload({ node_id: nodeId, node_secret: creds.node_secret }), remaining()),
        deadline,
        timeoutMs,
      );
      this.logger.log({ msg: "lease released; the node's mounts fail over now", node_id: nodeId, lease_expires_at_ms: r.lease_expires_at_ms });
      this.emit('released', { released: true, node_id: nodeId, lease_expires_at_ms: r.lease_expires_at_ms } satisfies LeaseReleaseOutcome);
    } catch (e) {
      fail(e instanceof ControlError ? `${e.code}: ${e.message}` : (e as Error).message);
    }
  }

  private applyFsToken(): void {
    this.host.setFsAuthToken(this.options.fixedFsAuthToken ?? this.state.credentials?.fs_auth_token ?? null);
  }

  private payload(body: Record<string, unknown>): Record<string, unknown> {
    return this.options.operatorToken ? { ...body, operator_token: this.options.operatorToken } : body;
  }

  private async save(): Promise<void> {
    this.state.updated_at_ms = Date.now();
    await this.stateFile.save(this.state);
  }

  private async run(): Promise<void> {
    const backoff = new Backoff(this.options.reconnectBackoffMs, this.options.reconnectBackoffMaxMs);
    while (!this.stop$.signal.aborted) {
      try {
        this.client = await ControlClient.connect({
          url: this.options.controlUrl,
          token: this.options.controlAuthToken,
          agentId: NODE_DAEMON_AGENT_ID,
          tls: this.options.tls,
        });
      } catch (e) {
        if (e instanceof ConnectionError && e.reason === 'unauthorized') {
          throw new DaemonFatal(`control plane ${this.options.controlUrl} refused the role token (HTTP 401): pass --control-auth-token or set SVC_AUTH_TOKEN`);
        }
        const delay = backoff.next();
        if (e instanceof ConnectionError && e.reason === 'tls') {
          // The certificate may be fixed on the server side (or --tls-ca here): keep trying, loudly.
          this.logger.error({ msg: `cannot connect to the control plane (attempt ${backoff.failures}): ${e.message}; retrying in ${delay} ms` });
        } else {
          this.logger.warn({ msg: `control plane unreachable (attempt ${backoff.failures}): ${(e as Error).message}; retrying in ${delay} ms` });
        }
        await sleep(delay, this.stop$.signal);
        continue;
      }
      backoff.reset();
      // Stopped while connecting: leave the session open for stop() (lease release) and do nothing more.
      if (this.stop$.signal.aborted) return;
      this.logger.log({ msg: 'connected to the control plane', url: this.options.controlUrl });
      try {
        await this.session(this.client);
      } catch (e) {
        if (e instanceof DaemonFatal) throw e;
        if (!(e instanceof ConnectionError)) this.logger.error({ msg: `control session failed: ${(e as Error).message}` });
      } finally {
        // On stop an open session stays for stop() to release the lease on, then close.
        if (!this.stop$.signal.aborted || !this.client.isOpen) {
          this.client.close();
          this.client = null;
        }
      }
      if (!this.stop$.signal.aborted) {
        const delay = backoff.next();
        this.logger.warn({ msg: `control session lost; reconnecting in ${delay} ms` });
        await sleep(delay, this.stop$.signal);
      }
    }
  }

  /** One control session: pair if needed, refresh, publish, then refresh periodically until it drops. */
  private async session(client: ControlClient): Promise<void> {
    let creds = await this.ensurePaired(client);
    creds = await this.refreshOrRepair(client, creds);
    await this.publish(client, creds);
    const closed = new AbortController();
    client.once('close', () => closed.abort());
    const either = AbortSignal.any([closed.signal, this.stop$.signal]);
    while (!either.aborted) {
      await sleep(this.options.refreshIntervalMs, either);
      if (either.aborted) return;
      const before = creds.node_id;
      creds = await this.refreshOrRepair(client, creds);
      if (creds.node_id !== before) await this.publish(client, creds);
    }
  }

  private async refreshOrRepair(client: ControlClient, creds: NodeCredentials): Promise<NodeCredentials> {
    try {
      const r = await client.request<{ lease_expires_at_ms: number }>(
        'node_lease_refresh',
        this.payload({
          node_id: creds.node_id,
          node_secret: creds.node_secret,
          lease_ttl_ms: this.options.leaseTtlMs,
          fs_url: this.options.fsUrl,
          ...(this.options.fixedFsAuthToken ? { fs_auth_token: this.options.fixedFsAuthToken } : {}),
        }),
      );
      this.emit('lease', r.lease_expires_at_ms);
      return creds;
    } catch (e) {
      if (e instanceof ControlError && (e.code === 'node_not_found' || e.code === 'node_auth_failed')) {
        this.logger.warn({ msg: `the control plane no longer accepts node ${creds.node_id} (${e.code}); pairing again` });
        this.state.credentials = null;
        await this.save();
        this.applyFsToken();
        const fresh = await this.ensurePaired(client);
        await this.refreshOrRepair(client, fresh);
        return fresh;
      }
      throw e;
    }
  }

  private async ensurePaired(client: ControlClient): Promise<NodeCredentials> {
    if (this.state.credentials) return this.state.credentials;
    const creds = this.options.pairMode === 'invite' ? await this.joinByInvite(client) : await this.joinByRequest(client);
    this.state.credentials = creds;
    this.state.pending_request = null;
    await this.save();
    this.applyFsToken();
    this.logger.log({ msg: 'paired with the control plane', node_id: creds.node_id, node_name: creds.node_name });
    this.emit('paired', { node_id: creds.node_id, node_name: creds.node_name });
    return creds;
  }

  private async joinByInvite(client: ControlClient): Promise<NodeCredentials> {
    if (!this.options.inviteToken) {
      throw new DaemonFatal('not paired and no invite: pass --invite-token (create one with `svc-control node_invite_create`) or use --pair-mode request');
    }
    try {
      return await client.request<NodeCredentials>(
        'node_join',
        this.payload({
          invite_token: this.options.inviteToken,
          node_name: this.options.nodeName,
          fs_url: this.options.fsUrl,
          platform: nodePlatform(),
          lease_ttl_ms: this.options.leaseTtlMs,
        }),
      );
    } catch (e) {
      if (e instanceof ControlError && ['invite_redeemed', 'invite_expired', 'invite_not_found'].includes(e.code)) {
        throw new DaemonFatal(
          `cannot pair by invite (${e.code}: ${e.message}). This node needs a new invite: create one with \`svc-control node_invite_create\` and restart with --invite-token <token>`,
        );
      }
      throw e;
    }
  }

  private async joinByRequest(client: ControlClient): Promise<NodeCredentials> {
    if (!this.state.pending_request) {
      const r = await client.request<{ request_id: string; request_secret: string; requested_at_ms: number }>(
        'node_join_request',
        this.payload({ node_name: this.options.nodeName, fs_url: this.options.fsUrl, platform: nodePlatform() }),
      );
      this.state.pending_request = { request_id: r.request_id, request_secret: r.request_secret, requested_at_ms: r.requested_at_ms };
      await this.save();
    }
    const pending = this.state.pending_request;
    this.logger.log({
      msg: `waiting for approval of join request ${pending.request_id}: svc-control node_join_approve '{"request_id":"${pending.request_id}"}'`,
      request_id: pending.request_id,
    });
    const poll = new Backoff(this.options.reconnectBackoffMs, Math.min(this.options.reconnectBackoffMaxMs, 10_000));
    for (;;) {
      let status: { state: string; credentials?: NodeCredentials };
      try {
        status = await client.request('node_join_status', this.payload({ request_id: pending.request_id, request_secret: pending.request_secret }));
      } catch (e) {
        if (e instanceof ControlError && e.code === 'pending_join_not_found') {
          this.logger.warn({ msg: `join request ${pending.request_id} is unknown to the control plane; filing a new one` });
          this.state.pending_request = null;
          await this.save();
          return this.joinByRequest(client);
        }
        throw e;
      }
      if (status.state === 'denied') {
        this.state.pending_request = null;
        await this.save();
        throw new DaemonFatal(`join request ${pending.request_id} was denied by an admin`);
      }
      if (status.state === 'approved') {
        if (status.credentials) return status.credentials;
        throw new DaemonFatal(
          `join request ${pending.request_id} was approved but its credentials were already collected; remove ${this.options.stateFile} and pair again`,
        );
      }
      await sleep(poll.next(), this.stop$.signal);
      if (this.stop$.signal.aborted) throw new ConnectionError('stopping', 'closed');
    }
  }

  /** Upserts the node's catalog record (after pairing and after every reconnect). */
  private async publish(client: ControlClient, creds: NodeCredentials): Promise<void> {
    const services = buildServices({
      nodeId: creds.node_id,
      exports: this.host.exports(),
      fsService: this.options.fsService,
      terminalIds: this.options.terminalIds,
      terminalAllowUser: this.options.terminalAllowUser,
      manifests: loadManifests(this.options.manifestFiles, this.options.servicesDir, builtInServiceIds(this.options.fsService, this.options.terminalIds)),
      labels: this.options.labels,
    });
    await client.request(
      'node_service_upsert',
      this.payload({ node_id: creds.node_id, node_secret: creds.node_secret, platform: nodePlatform(), labels: this.options.labels, services }),
    );
    const ids = services.map((s) => s.service_id);
    this.logger.log({ msg: 'catalog record published', services: ids });
    this.emit('published', ids);
  }

  /** Re-publishes (debounced) when a manifest in `--services-dir` changes; a bad manifest keeps the last good record. */
  private watchServicesDir(dir: string): void {
    this.servicesWatcher = watch(dir, () => {
      if (this.republish) clearTimeout(this.republish);
      this.republish = setTimeout(() => void this.republishNow(), 200);
    });
    this.servicesWatcher.on('error', (e) => this.logger.warn({ msg: `watching ${dir} failed: ${e.message}` }));
  }

  private async republishNow(): Promise<void> {
    const client = this.client;
    const creds = this.state.credentials;
    if (!client?.isOpen || !creds) return;
    try {
      await this.publish(client, creds);
    } catch (e) {
      const what = e instanceof ManifestError ? 'invalid manifest; the last published record stays' : 'publishing failed';
      this.logger.error({ msg: `${what}: ${(e as Error).message}` });
    }
  }
}

/** Resolves true when `p` settles before `deadline` (epoch ms), false otherwise; never rejects. */
async function beforeDeadline(p: Promise<unknown>, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), Math.max(0, deadline - Date.now()))));
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `p`, or a ConnectionError `timeout` when it has not settled by `deadline` (epoch ms).
 * @param timeoutMs the whole allowance, ms, named in the error message
 */
async function withinDeadline<T>(p: Promise<T>, deadline: number, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ConnectionError(`svc did not answer within ${timeoutMs} ms; gave up`, 'timeout')), Math.max(0, deadline - Date.now()));
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}
