/**
 * Configuration of the FS node server (libs/fs), given by the program that hosts it
 * (`svc-fs-node`) through {@link FsModule.forRoot}.
 */
import type { FsFeature } from '@svc/protocol';
import type { FsBackend } from './fs-backend';

/** One export to serve (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" `exports`). */
export interface ExportDefinition {
  /** Identifier-safe export name. */
  name: string;
  /** Read-only export: every mutation is EROFS. */
  ro: boolean;
  /** Human-readable description listed by `exports`. */
  desc: string;
  /** What serves the export (a local directory, a synthetic tree). */
  backend: FsBackend;
}

/** Options of the FS node server. */
export class FsNodeOptions {
  /** The exports, in listing order. */
  exports: ExportDefinition[];
  /**
   * FS session token (`--auth-token` / `SVC_FS_NODE_AUTH_TOKEN`, or the paired `fs_auth_token`
   * in control daemon mode); null: FS session auth off, unless {@link authRequired}. The daemon
   * changes it at run time (pairing, re-pairing); sessions check it at their hello.
   */
  authToken: string | null;
  /** Refuse every session while {@link authToken} is null (daemon mode before pairing). */
  authRequired?: boolean;
  /** Node name reported in `acheron.r_fs_hello` `node.name`. */
  nodeName: string;
  /** Software version reported in `acheron.r_fs_hello` `node.ver`. */
  version: string;
  /**
   * FS extensions this node grants to sessions that ask for them (`--fs-features` /
   * `SVC_FS_NODE_FEATURES`; docs/protocol.md "FS extensions"). Default: every extension.
   */
  features?: readonly FsFeature[];
}
