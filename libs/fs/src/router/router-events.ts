/**
 * The events a {@link WorkspaceRouter} emits (for a FUSE layer on top), their shapes in one
 * place: `topology`, `failover`, `unavailable`, `inval`, `inval_dir`, `dir_attr`.
 */
import type { Attr } from '@svc/protocol';

/**
 * `topology` event: which mount paths appeared or disappeared, and which changed the endpoint
 * that serves them (their next operation connects anew). Candidates only reordered, with the
 * serving endpoint kept (two online nodes alternating by lease expiry), are no change.
 */
export interface TopologyChange {
  mountPaths: string[];
  added: string[];
  removed: string[];
  changed: string[];
}

/** `failover` event: a mount moved from one candidate to another (or reconnected). */
export interface FailoverEvent {
  mount_path: string;
  from: string | null;
  to: string;
  cause: string | null;
}

/** `unavailable` event: the FS session serving a mount ended; the mount moves on at its next use. */
export interface UnavailableEvent {
  mount_path: string;
  cause: string;
}

/** `inval` event: a node's attributes or data changed (`what` as in `acheron.e_fs_inval`). */
export interface PathInval {
  mount_path: string;
  /** Workspace paths known for the node (may be empty when the router never resolved it). */
  paths: string[];
  node: number;
  what: 'attr' | 'data' | 'all';
  /**
   * The change was made through this mount's own request and is known under `paths` alone
   * (see `inval-fanout.ts`): what the request's reply did to the caches is all there is to do.
   */
  own: boolean;
}

/** `inval_dir` event: a directory's entries changed. */
export interface DirInval {
  mount_path: string;
  paths: string[];
  dir: number;
  /** As {@link PathInval.own}. */
  own: boolean;
}

/**
 * `dir_attr` event: a mutation of this router's added, removed or renamed an entry of directory
 * `path`, on a node that granted the `dir_attr` extension (and so pushes none of it back).
 * Emitted before the mutation's call returns.
 */
export interface DirAttrEvent {
  /** Workspace path of the directory. */
  path: string;
  /** The directory's attributes after the mutation, from its reply; null when the node could not read them. */
  attr: Attr | null;
}

/** Event name -> payload of every router event. */
export interface RouterEvents {
  topology: TopologyChange;
  failover: FailoverEvent;
  unavailable: UnavailableEvent;
  inval: PathInval;
  inval_dir: DirInval;
  dir_attr: DirAttrEvent;
}

/** Emits one router event (the router's `emit`, narrowed for the parts that only report). */
export type RouterEmit = <K extends keyof RouterEvents>(name: K, ev: RouterEvents[K]) => void;
