/**
 * FS wire shapes the router uses, from the shared definitions (libs/protocol/src/fs.ts,
 * docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"), re-exported so router users need one import.
 */
export { NodeKind, OpenFlags } from '@svc/protocol/wire';
export type { Attr, DirAttrReply, DirEntry, ExportInfo, InvalDirEvent, InvalEvent, SetAttr, StatFs } from '@svc/protocol/wire';
