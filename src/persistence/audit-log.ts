/**
 * The audit log in the store (docs/protocol.md "Audit log" `control.audit_list`): entries
 * are insert-only rows of their own table (`svc_audit`), never part of the in-memory read
 * model. An entry that records a mutation is written in the transaction that commits the
 * mutation (see {@link AuditScope}); other entries (refusals, failures) are written by
 * themselves. Queries ({@link AuditQuery}) and pruning ({@link AuditRetention}) go to the
 * database directly.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { AuditEntry } from '@svc/protocol';

export type { AuditEntry };

/**
 * The audit record of one control request in progress: created by the audit gate before the
 * handler runs, and carried (through {@link auditScope}) into `StateService.mutate`, which
 * appends `entry(result)` to the first mutation of the request that succeeds, so the entry
 * commits with it.
 */
export interface AuditScope {
  /** Whether every outcome of this request is recorded (an audited mutation), or only refusals. */
  readonly audited: boolean;
  /** The entry with result `"ok"`, given what the mutation returned (for ids it created). */
  entry(result: unknown): AuditEntry;
  /** Set once the entry has been committed with a mutation (nothing more to record). */
  recorded: boolean;
}

/** The {@link AuditScope} of the request whose handler is running (Node's AsyncLocalStorage). */
export const auditScope = new AsyncLocalStorage<AuditScope>();

/** A page request of `control.audit_list`, as the store answers it. */
export interface AuditQuery {
  /** Inclusive bounds on `ts_ms`, ms since the epoch. */
  sinceMs?: number;
  untilMs?: number;
  agentId?: string;
  type?: string;
  /** Entries older than this position (a previous page's last), or from the newest. */
  beforeSeq?: number;
  /** Page size, 1 to 1000. */
  limit: number;
}

/** A page of entries, newest first, with the position of the last one. */
export interface AuditPage {
  entries: AuditEntry[];
  /** Position of the last entry of the page, to continue from; null when no more match. */
  nextBeforeSeq: number | null;
}

/** What retention keeps: the entries recorded at or after `minTsMs`, at most the newest `maxEntries` of them. */
export interface AuditRetention {
  /** Entries recorded before this time (ms since the epoch) are dropped. */
  minTsMs: number;
  /** Only the newest this many entries are kept. */
  maxEntries: number;
}
