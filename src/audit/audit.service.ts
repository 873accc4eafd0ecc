/**
 * The audit log (docs/protocol.md "Audit log" `control.audit_list`): who changed what, and
 * which authentications were refused, kept in the state store so that it survives restarts
 * and is shared by the replicas of a PostgreSQL store.
 *
 * - Every control mutation (AUDITED_OPERATIONS) is recorded once with its result: `"ok"` in
 *   the very transaction that commits the mutation (`StateService.mutate` appends it, through
 *   the request's {@link AuditScope}), or the error code of a refused or failed request.
 * - Every refused authentication (AUTH_REFUSAL_CODES: operator token, project token, node
 *   secret) is recorded, whatever the request type.
 * - Entries that ride on no mutation (refusals, failures) are written by themselves, at most
 *   20 a second over the process and 5 a second per session ({@link RefusalLimiter}); what
 *   goes over is counted in `svc_audit_dropped_total` and logged once every 10 s, so a flood
 *   of bad tokens can grow neither the log nor the write load without bound.
 * - Retention: entries older than `SVC_AUDIT_RETENTION_DAYS` (default 30) and all but the
 *   newest `SVC_AUDIT_MAX_ENTRIES` (default 100000) are deleted at start and every minute, by
 *   the sweeper replica only.
 * - An entry holds ids, a mount path, the role and agent of the session, the type and the
 *   result: never a payload, a token or a secret. Log lines about it hold none either.
 *
 * The dashboard (and any other in-process reader) follows {@link AuditService.entries$}: every
 * entry once committed, those of other replicas included.
 */
import { Injectable, Logger, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { Subject, Subscription } from 'rxjs';
import { Counter } from 'prom-client';
import { getOrCreate } from '@svc/ops';
import {
  AUDIT_LIST_DEFAULT_LIMIT,
  AuditEntry,
  AuditListResult,
  AuditTarget,
  AUTH_REFUSAL_CODES,
  isIdentifierSafe,
  normalizeMountPath,
  ProtocolError,
  Role,
} from '@svc/protocol';
import { Clock } from '../common/clock';
import { ServerConfig } from '../config';
import { AuditScope } from '../persistence/audit-log';
import { StateLoadError, StoreUnavailableError } from '../persistence/state-store.port';
import { StateView } from '../persistence/state.model';
import { StateService } from '../persistence/state.service';
import { DEFAULT_REFUSAL_LIMITS, RefusalLimiter } from './rate-limit';

/** How often the sweeper replica applies retention, ms. */
export const AUDIT_PRUNE_INTERVAL_MS = 60_000;
/** Dropped entries are logged at most this often, ms. */
const DROP_LOG_INTERVAL_MS = 10_000;

/** Who made a request, for its entry. */
export interface AuditActor {
  role: Role;
  agentId: string;
  /** The session, for the per-session rate limit of refusals. */
  sessionId: string;
}

/** An entry to record with {@link AuditService.record}; `ts_ms` defaults to now. */
export type AuditInput = Omit<AuditEntry, 'ts_ms'> & { ts_ms?: number };

/** `control.audit_list` filters (docs/protocol.md "Audit log"). */
export interface AuditListInput {
  since_ms?: number;
  until_ms?: number;
  actor_agent_id?: string;
  type?: string;
  limit?: number;
  cursor?: string;
}

/**
 * The target of a request (docs/protocol.md "Audit log" `control.audit_list`): `project_id`, `node_id` and
 * `request_id` from the reply (ids it created) or the payload, `mount_path` from the payload,
 * normalised. An id taken from the payload of a request that did not succeed is kept only
 * when the store knows it (`known`), so that a secret pasted into an id field is never
 * recorded; values that are not well-formed are left out.
 */
export function targetOf(
  payload: Record<string, unknown>,
  result: unknown,
  known: ((field: 'project_id' | 'node_id' | 'request_id', id: string) => boolean) | null,
): AuditTarget {
  const target: AuditTarget = {};
  const reply = result !== null && typeof result === 'object' ? (result as Record<string, unknown>) : {};
  for (const field of ['project_id', 'node_id', 'request_id'] as const) {
    const fromReply = reply[field];
    const fromPayload = payload[field];
    if (isIdentifierSafe(fromReply)) target[field] = fromReply;
    else if (isIdentifierSafe(fromPayload) && (known === null || known(field, fromPayload))) target[field] = fromPayload;
  }
  if (typeof payload.mount_path === 'string') {
    try {
      target.mount_path = normalizeMountPath(payload.mount_path);
    } catch {
      /* not a mount path: left out */
    }
  }
  return target;
}

@Injectable()
export class AuditService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('Audit');
  /** Every audit entry once committed, by this replica or (on a shared store) another. */
  readonly entries$ = new Subject<AuditEntry>();
  private readonly limiter: RefusalLimiter;
  private sub: Subscription | null = null;
  private timer: NodeJS.Timeout | null = null;
  private dropped = 0;
  private lastDropLog = 0;
  private readonly droppedTotal = getOrCreate(
    'svc_audit_dropped_total',
    () =>
      new Counter({
        name: 'svc_audit_dropped_total',
        help: 'Audit entries of refusals and failures not written (rate limit, or the store could not be reached)',
        labelNames: ['reason'],
      }),
  );

  constructor(
    private readonly store: StateService,
    private readonly clock: Clock,
    private readonly config: ServerConfig,
  ) {
    this.limiter = new RefusalLimiter(DEFAULT_REFUSAL_LIMITS, clock.now());
  }

  onModuleInit(): void {
    this.sub = this.store.applied$.subscribe(({ changes }) => {
      for (const e of changes.audit ?? []) this.entries$.next(e);
    });
    this.store.addOpenHook(async () => {
      await this.prune();
    });
    this.timer = setInterval(() => void this.prune(), AUDIT_PRUNE_INTERVAL_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    this.sub?.unsubscribe();
    if (this.timer) clearInterval(this.timer);
    this.entries$.complete();
  }

  /**
   * The audit record of a request about to be handled (see {@link AuditScope}).
   * @param audited whether every outcome is recorded (an audited mutation) or only refused authentications
   */
  scope(
    actor: AuditActor,
    type: string,
    payload: Record<string, unknown>,
    audited: boolean,
  ): AuditScope & { actor: AuditActor; type: string; payload: Record<string, unknown> } {
    return {
      actor,
      type,
      payload,
      audited,
      recorded: false,
      entry: (result: unknown) => this.entryOf(actor, type, targetOf(payload, result, null), 'ok'),
    };
  }

  /**
   * Records the outcome of a request whose entry did not commit with a mutation: `"ok"` for an
   * audited request that succeeded without one, else the error code, when the request is
   * audited or the code is a refused authentication. Rate limited unless `"ok"`.
   */
  async settle(scope: ReturnType<AuditService['scope']>, result: unknown, code: string | null): Promise<void> {
    if (scope.recorded) return;
    if (code === null ? !scope.audited : !scope.audited && !AUTH_REFUSAL_CODES.includes(code)) return;
    scope.recorded = true;
    const { actor, type, payload } = scope;
    if (code === null) {
      await this.write(this.entryOf(actor, type, targetOf(payload, result, null), 'ok'), actor.sessionId);
      return;
    }
    // which payload ids exist is decided on the state the entry commits over (on a shared
    // store, current with the other replicas' commits)
    await this.write(
      (state) => {
        const known = (field: 'project_id' | 'node_id' | 'request_id', id: string) =>
          field === 'project_id' ? state.projects.has(id) : field === 'node_id' ? state.nodes.has(id) : state.joinRequests.has(id);
        return this.entryOf(actor, type, targetOf(payload, null, known), code);
      },
      actor.sessionId,
      code,
    );
  }

  /**
   * Records an entry by itself (e.g. a refused sign-in of another front end). Entries whose
   * result is not `"ok"` are rate limited (per `source` and overall) and may be dropped.
   * Never throws: a failure to write is logged (without the entry's content) and counted.
   * @param source who caused it, for the per-source limit (a session id, a remote address), or null
   * @returns whether the entry was written
   */
  async record(input: AuditInput, source: string | null = null): Promise<boolean> {
    return this.write(
      {
        ts_ms: input.ts_ms ?? this.clock.now(),
        role: input.role,
        agent_id: input.agent_id,
        type: input.type,
        target: { ...input.target },
        result: input.result,
      },
      source,
      input.result,
    );
  }

  /**
   * `control.audit_list` (docs/protocol.md "Audit log"): a page of entries, newest first, read from the store.
   * @throws ProtocolError `invalid_payload` (since after until), `unavailable` (store unreachable),
   *   `internal_error` (an entry cannot be decrypted)
   */
  async list(input: AuditListInput): Promise<AuditListResult> {
    if (input.since_ms !== undefined && input.until_ms !== undefined && input.since_ms > input.until_ms) {
      throw new ProtocolError('invalid_payload', 'since_ms must not be after until_ms');
    }
    try {
      const page = await this.store.queryAudit({
        sinceMs: input.since_ms,
        untilMs: input.until_ms,
        agentId: input.actor_agent_id,
        type: input.type,
        beforeSeq: input.cursor !== undefined ? Number(input.cursor) : undefined,
        limit: input.limit ?? AUDIT_LIST_DEFAULT_LIMIT,
      });
      return { entries: page.entries, next_cursor: page.nextBeforeSeq === null ? null : String(page.nextBeforeSeq) };
    } catch (e) {
      if (e instanceof StoreUnavailableError) throw new ProtocolError('unavailable', `the state store cannot be reached (${e.message}); retry later`);
      if (e instanceof StateLoadError) throw new ProtocolError('internal_error', e.message);
      throw e;
    }
  }

  /**
   * Applies retention (on the sweeper replica only; another replica's call does nothing).
   * @returns how many entries were deleted
   */
  async prune(): Promise<number> {
    if (!this.store.isSweeper || !this.store.isLoaded) return 0;
    try {
      const n = await this.store.pruneAudit({
        minTsMs: this.clock.now() - Math.round(this.config.auditRetentionDays * 86_400_000),
        maxEntries: this.config.auditMaxEntries,
      });
      if (n > 0)
        this.logger.log({
          msg: 'audit retention applied',
          deleted: n,
          retention_days: this.config.auditRetentionDays,
          max_entries: this.config.auditMaxEntries,
        });
      return n;
    } catch (e) {
      this.logger.warn({ msg: 'audit retention could not run; will retry', error: (e as Error).message });
      return 0;
    }
  }

  private entryOf(actor: AuditActor, type: string, target: AuditTarget, result: string): AuditEntry {
    return { ts_ms: this.clock.now(), role: actor.role, agent_id: actor.agentId, type, target, result };
  }

  /**
   * Writes one entry by itself (made from the state it commits over when a function);
   * rate limited unless its result is `"ok"`.
   */
  private async write(entry: AuditEntry | ((state: StateView) => AuditEntry), source: string | null, result = 'ok'): Promise<boolean> {
    if (result !== 'ok' && !this.limiter.allow(source, this.clock.now())) {
      this.drop('rate_limited');
      return false;
    }
    try {
      await this.store.appendAudit(typeof entry === 'function' ? (state) => [entry(state)] : [entry]);
      return true;
    } catch (e) {
      this.drop('store_error');
      this.logger.warn({ msg: 'an audit entry could not be written', result, error: (e as Error).message });
      return false;
    }
  }

  private drop(reason: 'rate_limited' | 'store_error'): void {
    this.droppedTotal.inc({ reason });
    this.dropped++;
    const now = this.clock.now();
    if (now - this.lastDropLog >= DROP_LOG_INTERVAL_MS) {
      this.logger.warn({ msg: 'audit entries of refusals or failures were not written (rate limit or store error)', count: this.dropped, reason });
      this.dropped = 0;
      this.lastDropLog = now;
    }
  }
}
