/**
 * Payload DTOs of the FS operations (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"), validated by `@Payload()` with
 * class-validator. A failure is `invalid_payload`/`missing_field`, sent on the FS session as
 * errno 22 EINVAL with the field named. Names are checked by `validateName` (EINVAL,
 * ENAMETOOLONG), not here. Each implements the payload of its operations in the request map
 * (`FsRequests`, libs/protocol/src/fs.ts). Units: bytes for offsets and sizes, ns since the epoch for times.
 */
import 'reflect-metadata';
import { Type } from 'class-transformer';
import { IsArray, IsBoolean, IsIn, IsInt, IsObject, IsOptional, IsString, Max, MaxLength, Min, ValidateBy, ValidateNested } from 'class-validator';
import { Cred, FsPayload, LockKind, LockType, PREFETCH_MAX_NAMES, WriteThen } from '@svc/protocol';

const U32_MAX = 0xffff_ffff;
/** Largest time accepted, ns (about the year 2262, the end of a signed 64-bit ns clock). */
const NS_MAX = 9.2e18;

function UInt(field: string, max = Number.MAX_SAFE_INTEGER): PropertyDecorator {
  return (target: object, key: string | symbol) => {
    IsInt({ message: `${field} must be an integer` })(target, key);
    Min(0, { message: `${field} must not be negative` })(target, key);
    Max(max, { message: `${field} must be at most ${max}` })(target, key);
  };
}
function Ns(field: string): PropertyDecorator {
  return (target: object, key: string | symbol) => {
    IsInt({ message: `${field} must be an integer (ns since the epoch)` })(target, key);
    Min(-NS_MAX, { message: `${field} is out of range` })(target, key);
    Max(NS_MAX, { message: `${field} is out of range` })(target, key);
  };
}
function Str(field: string): PropertyDecorator {
  return IsString({ message: `${field} must be a string` });
}

/** `ack` `{seq}`: the last invalidation push applied (the `inval_ack` extension). */
export class AckDto implements FsPayload<'ack'> {
  @UInt('seq', Number.MAX_SAFE_INTEGER)
  seq: number;
}

/** `cred` `{uid, gid}` of `create`, `mkdir`, `symlink` and `mknod` (the `posix` extension): the caller's ids. */
export class CredDto implements Cred {
  @UInt('cred.uid', U32_MAX - 1)
  uid: number;

  @UInt('cred.gid', U32_MAX - 1)
  gid: number;
}

/** A `cred` member: an object `{uid, gid}` ({@link CredDto}). */
function IsCred(): PropertyDecorator {
  return (target: object, key: string | symbol) => {
    IsObject({ message: 'cred must be an object {uid, gid}' })(target, key);
    ValidateNested()(target, key);
    Type(() => CredDto)(target, key);
  };
}

/** Longest lock owner name accepted, characters. */
const LOCK_OWNER_MAX = 128;

/** `getlk` `{kind, type, start?, len?, owner}` (the `posix` extension): a lock to test; bytes. */
export class GetlkDto implements FsPayload<'getlk'> {
  @Str('kind')
  @IsIn(['posix', 'flock'], { message: 'kind must be "posix" or "flock"' })
  kind: LockKind;

  @Str('type')
  @IsIn(['rd', 'wr', 'un'], { message: 'type must be "rd", "wr" or "un"' })
  type: LockType;

  @IsOptional()
  @UInt('start')
  start?: number;

  @IsOptional()
  @UInt('len')
  len?: number;

  @Str('owner')
  @MaxLength(LOCK_OWNER_MAX, { message: `owner must be at most ${LOCK_OWNER_MAX} characters` })
  owner: string;
}

/** `lock` `{kind, type, start?, len?, owner, wait?, pid?}` (the `posix` extension); bytes. */
export class LockDto extends GetlkDto implements FsPayload<'lock'> {
  @IsOptional()
  @IsBoolean({ message: 'wait must be a boolean' })
  wait?: boolean;

  @IsOptional()
  @UInt('pid', U32_MAX)
  pid?: number;
}

/** `lock_cancel` `{tag}`: the tag of a waiting `lock` of this session. */
export class LockCancelDto implements FsPayload<'lock_cancel'> {
  @UInt('tag')
  tag: number;
}

/** `lookup`, `unlink`, `rmdir` `{name}`. */
export class NameDto implements FsPayload<'lookup'>, FsPayload<'unlink'>, FsPayload<'rmdir'> {
  @Str('name')
  name: string;
}

/** `setattr` `{mode?, uid?, gid?, sz?, at?, mt?}`: permission bits, owner ids, size (bytes), times (ns). */
export class SetattrDto implements FsPayload<'setattr'> {
  @IsOptional()
  @UInt('mode', 0o177777)
  mode?: number;

  @IsOptional()
  @UInt('uid', U32_MAX - 1)
  uid?: number;

  @IsOptional()
  @UInt('gid', U32_MAX - 1)
  gid?: number;

  @IsOptional()
  @UInt('sz')
  sz?: number;

  @IsOptional()
  @Ns('at')
  at?: number;

  @IsOptional()
  @Ns('mt')
  mt?: number;
}

/** `readdirp` `{cookie, max}`: `cookie` 0 for the first page, then the previous reply's `next`. */
export class ReaddirpDto implements FsPayload<'readdirp'> {
  @IsOptional()
  @UInt('cookie')
  cookie?: number;

  @IsOptional()
  @UInt('max', U32_MAX)
  max?: number;
}

/**
 * `open` `{flags, read?, close_at_eof?}`: Linux O_* bits (default O_RDONLY); with the
 * `open_read` extension, `read` bytes to read at offset 0 (above max_read: clamped) and whether
 * the node closes the handle when the whole file came back (docs/protocol.md "FS extensions").
 * Without the extension `read` and `close_at_eof` are ignored like any unknown member.
 */
export class OpenDto implements FsPayload<'open'> {
  @IsOptional()
  @UInt('flags', U32_MAX)
  flags?: number;

  @IsOptional()
  @UInt('read', U32_MAX)
  read?: number;

  @IsOptional()
  @IsBoolean({ message: 'close_at_eof must be a boolean' })
  close_at_eof?: boolean;
}

/**
 * `prefetch` `{names, max_file?, max_total?}` (the `prefetch` extension): at most 1024 entry
 * names of the directory (each checked like any name, per entry), bytes per file and bytes per
 * reply (above the node's limits: clamped).
 */
export class PrefetchDto implements FsPayload<'prefetch'> {
  @IsArray({ message: 'names must be an array' })
  @ValidateBy({
    name: 'isNameList',
    validator: {
      validate: (v: unknown) => Array.isArray(v) && v.length <= PREFETCH_MAX_NAMES && v.every((n) => typeof n === 'string'),
      defaultMessage: () => `names must be an array of at most ${PREFETCH_MAX_NAMES} strings`,
    },
  })
  names: string[];

  @IsOptional()
  @UInt('max_file', U32_MAX)
  max_file?: number;

  @IsOptional()
  @UInt('max_total', U32_MAX)
  max_total?: number;
}

/** `create` `{name, mode, flags}` (permission bits, default 0644; Linux O_* bits, default O_RDWR). */
export class CreateDto implements FsPayload<'create'> {
  @Str('name')
  name: string;

  @IsOptional()
  @UInt('mode', 0o177777)
  mode?: number;

  @IsOptional()
  @UInt('flags', U32_MAX)
  flags?: number;

  @IsOptional()
  @IsCred()
  cred?: Cred;
}

/** `read` `{off, len}` in bytes; `len` above max_read is clamped. */
export class ReadDto implements FsPayload<'read'> {
  @UInt('off')
  off: number;

  @UInt('len')
  len: number;
}

/** `set` of a `write` (the `write_then` extension): `setattr`'s members but the size; ids, permission bits, times (ns). */
export class WriteSetDto implements NonNullable<WriteThen['set']> {
  @IsOptional()
  @UInt('set.mode', 0o177777)
  mode?: number;

  @IsOptional()
  @UInt('set.uid', U32_MAX - 1)
  uid?: number;

  @IsOptional()
  @UInt('set.gid', U32_MAX - 1)
  gid?: number;

  @IsOptional()
  @Ns('set.at')
  at?: number;

  @IsOptional()
  @Ns('set.mt')
  mt?: number;
}

/**
 * `write` `{off, data_b64}` (JSON path) or `{off, n?}` with the bytes in a binary frame; with
 * the `write_then` extension also `set?` ({@link WriteSetDto}) and `sync?` (boolean).
 */
export class WriteDto implements FsPayload<'write'> {
  @UInt('off')
  off: number;

  @IsOptional()
  @Str('data_b64')
  data_b64?: string;

  @IsOptional()
  @UInt('n')
  n?: number;

  @IsOptional()
  @IsObject({ message: 'set must be an object {mode?, uid?, gid?, at?, mt?}' })
  @ValidateNested()
  @Type(() => WriteSetDto)
  set?: WriteSetDto;

  @IsOptional()
  @IsBoolean({ message: 'sync must be a boolean' })
  sync?: boolean;
}

/** `truncate` and `ftruncate` `{sz}` in bytes. */
export class TruncateDto implements FsPayload<'truncate'>, FsPayload<'ftruncate'> {
  @UInt('sz')
  sz: number;
}

/** `fallocate` `{mode?, off, len}`: a fallocate(2) mode (FALLOCATE_MODES, checked by the service), offset and length in bytes. */
export class FallocateDto implements FsPayload<'fallocate'> {
  @IsOptional()
  @UInt('mode', 0xff)
  mode?: number;

  @UInt('off')
  off: number;

  @UInt('len')
  len: number;
}

/** `mkdir` `{name, mode}` (permission bits, default 0755). */
export class MkdirDto implements FsPayload<'mkdir'> {
  @Str('name')
  name: string;

  @IsOptional()
  @UInt('mode', 0o177777)
  mode?: number;

  @IsOptional()
  @IsCred()
  cred?: Cred;
}

/** `rename` `{old_parent, old_name, new_parent, new_name}` (node ids of the two directories). */
export class RenameDto implements FsPayload<'rename'> {
  @UInt('old_parent')
  old_parent: number;

  @Str('old_name')
  old_name: string;

  @UInt('new_parent')
  new_parent: number;

  @Str('new_name')
  new_name: string;

  @IsOptional()
  @UInt('flags', 3)
  flags?: number;
}

/** `link` `{new_parent, new_name}` (the `posix` extension): another name for the target node. */
export class LinkDto implements FsPayload<'link'> {
  @UInt('new_parent')
  new_parent: number;

  @Str('new_name')
  new_name: string;
}

/** `mknod` `{name, mode, rdev?}` (the `posix` extension): `mode` has the type bits (FIFO, socket, device, regular file). */
export class MknodDto implements FsPayload<'mknod'> {
  @Str('name')
  name: string;

  @UInt('mode', 0o177777)
  mode: number;

  @IsOptional()
  @UInt('rdev')
  rdev?: number;

  @IsOptional()
  @IsCred()
  cred?: Cred;
}

/** Longest extended attribute name accepted, bytes (XATTR_NAME_MAX). */
const XATTR_NAME_MAX = 255;
/** Largest extended attribute value accepted, bytes (XATTR_SIZE_MAX). */
export const XATTR_SIZE_MAX = 65536;

/** `getxattr` `{name, size}` / `removexattr` `{name}` (the `posix` extension); `size` bytes (0: only the length). */
export class XattrNameDto implements FsPayload<'removexattr'> {
  @Str('name')
  @MaxLength(XATTR_NAME_MAX, { message: `name must be at most ${XATTR_NAME_MAX} characters` })
  name: string;
}

/** `getxattr` `{name, size}` (the `posix` extension). */
export class GetxattrDto extends XattrNameDto implements FsPayload<'getxattr'> {
  @UInt('size', XATTR_SIZE_MAX)
  size: number;
}

/** `setxattr` `{name, value_b64, flags?}` (the `posix` extension). */
export class SetxattrDto extends XattrNameDto implements FsPayload<'setxattr'> {
  @Str('value_b64')
  @MaxLength(((XATTR_SIZE_MAX + 2) / 3) * 4 + 4, { message: `value_b64 must encode at most ${XATTR_SIZE_MAX} bytes` })
  value_b64: string;

  @IsOptional()
  @UInt('flags', 3)
  flags?: number;
}

/** `listxattr` `{size}` (the `posix` extension): `size` bytes of the NUL-separated list (0: only the length). */
export class ListxattrDto implements FsPayload<'listxattr'> {
  @UInt('size', XATTR_SIZE_MAX)
  size: number;
}

/** `symlink` `{name, target}`: `target` is stored as given (any text without NUL, at most 4095 bytes). */
export class SymlinkDto implements FsPayload<'symlink'> {
  @Str('name')
  name: string;

  @Str('target')
  target: string;

  @IsOptional()
  @IsCred()
  cred?: Cred;
}
