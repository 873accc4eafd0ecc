/**
 * Payload DTOs of the control operations. Validated by
 * {@link validatePayload}; field names are the wire names. Every member has a type constraint
 * (`IsString`, `IsInt`, `IsObject`), whose message is the one a value of the wrong type gets.
 */
import 'reflect-metadata';
import { Type } from 'class-transformer';
import {
  ArrayMaxSize,
  IsArray,
  IsBoolean,
  IsIn,
  IsInt,
  IsObject,
  IsOptional,
  IsString,
  Length,
  Matches,
  Max,
  MaxLength,
  Min,
  ValidateNested,
} from 'class-validator';
import { AUDIT_LIST_MAX_LIMIT, LEASE_TTL_MAX_MS, LEASE_TTL_MIN_MS } from '../constants';

const IDENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;
const IDENT_MSG = (field: string) => `${field} must be identifier-safe: 1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with "."`;
// Lengths are checked by their own constraints, so the empty string passes this one.
// eslint-disable-next-line no-control-regex -- refusing control characters is its purpose
const PRINTABLE = /^[^\u0000-\u001f\u007f]*$/;
const WS_URL = /^wss?:\/\/[^\s/?#]+(\/[^\s]*)?$/;
const TOKEN_MAX = 512;

function Ident(field: string): PropertyDecorator {
  return (target: object, key: string | symbol) => {
    IsString({ message: `${field} must be a string` })(target, key);
    Matches(IDENT, { message: IDENT_MSG(field) })(target, key);
  };
}
function LeaseTtl(): PropertyDecorator {
  return (target: object, key: string | symbol) => {
    IsInt({ message: 'lease_ttl_ms must be an integer (ms)' })(target, key);
    Min(LEASE_TTL_MIN_MS, { message: `lease_ttl_ms must be at least ${LEASE_TTL_MIN_MS} ms` })(target, key);
    Max(LEASE_TTL_MAX_MS, { message: `lease_ttl_ms must be at most ${LEASE_TTL_MAX_MS} ms` })(target, key);
  };
}
function Secret(field: string): PropertyDecorator {
  return (target: object, key: string | symbol) => {
    IsString({ message: `${field} must be a string` })(target, key);
    Length(1, TOKEN_MAX, { message: `${field} must be 1 to ${TOKEN_MAX} characters` })(target, key);
  };
}

/** `control.version` `{protocol}`; the value itself is checked by the handler (`protocol_mismatch`). */
export class VersionDto {
  @IsString({ message: 'protocol must be a string' })
  protocol: string;
}

/** `control.connect` `{agent_id?}` (docs/protocol.md "Envelope and errors"). */
export class ConnectDto {
  @IsOptional()
  @Ident('agent_id')
  agent_id?: string;
}

/** `access_policy` of a project: `invoke` is `"allow"` or `"deny"` (default deny, docs/protocol.md "Workspace status"). */
export class AccessPolicyDto {
  @IsOptional()
  @IsString({ message: 'access_policy.invoke must be a string ("allow" or "deny")' })
  @IsIn(['allow', 'deny'], { message: 'access_policy.invoke must be "allow" or "deny"' })
  invoke?: 'allow' | 'deny';
}

/** `control.project_create` `{name, vision?, access_policy?}`. */
export class ProjectCreateDto {
  @IsString({ message: 'name must be a string' })
  @Length(1, 256, { message: 'name must be 1 to 256 characters' })
  @Matches(PRINTABLE, { message: 'name must not contain control characters' })
  name: string;

  @IsOptional()
  @IsString({ message: 'vision must be a string' })
  @MaxLength(4096, { message: 'vision must be at most 4096 characters' })
  vision?: string;

  @IsOptional()
  @IsObject({ message: 'access_policy must be an object' })
  @ValidateNested()
  @Type(() => AccessPolicyDto)
  access_policy?: AccessPolicyDto;
}

/** Payloads naming one project, with the optional project token (`project_get`, `project_mount_list`, `project_activate`, token rotate/revoke). */
export class ProjectRefDto {
  @Ident('project_id')
  project_id: string;

  @IsOptional()
  @Secret('project_token')
  project_token?: string;
}

/** `control.project_update` `{project_id, name?, vision?, access_policy?}`. */
export class ProjectUpdateDto {
  @Ident('project_id')
  project_id: string;

  @IsOptional()
  @IsString({ message: 'name must be a string' })
  @Length(1, 256, { message: 'name must be 1 to 256 characters' })
  @Matches(PRINTABLE, { message: 'name must not contain control characters' })
  name?: string;

  @IsOptional()
  @IsString({ message: 'vision must be a string' })
  @MaxLength(4096, { message: 'vision must be at most 4096 characters' })
  vision?: string;

  @IsOptional()
  @IsObject({ message: 'access_policy must be an object' })
  @ValidateNested()
  @Type(() => AccessPolicyDto)
  access_policy?: AccessPolicyDto;
}

/** `control.project_mount_set` `{project_id, node_id, export_name, mount_path}`. */
export class MountSetDto {
  @Ident('project_id')
  project_id: string;

  @Ident('node_id')
  node_id: string;

  @Ident('export_name')
  export_name: string;

  /** Normalised and checked by the service (absolute, no `.`/`..`, no control characters). */
  @IsString({ message: 'mount_path must be a string' })
  mount_path: string;
}

/** `control.project_mount_remove` `{project_id, mount_path, node_id?, export_name?}`. */
export class MountRemoveDto {
  @Ident('project_id')
  project_id: string;

  @IsString({ message: 'mount_path must be a string' })
  mount_path: string;

  @IsOptional()
  @Ident('node_id')
  node_id?: string;

  @IsOptional()
  @Ident('export_name')
  export_name?: string;
}

/** `control.workspace_status` `{project_id?, project_token?}` (docs/protocol.md "Workspace status"). */
export class WorkspaceStatusDto {
  @IsOptional()
  @Ident('project_id')
  project_id?: string;

  @IsOptional()
  @Secret('project_token')
  project_token?: string;
}

/** `control.auth_rotate` `{role}`. */
export class AuthRotateDto {
  @IsString({ message: 'role must be a string ("admin" or "user")' })
  @IsIn(['admin', 'user'], { message: 'role must be "admin" or "user"' })
  role: 'admin' | 'user';
}

/** `control.node_invite_create` `{ttl_ms?}` (ms; default 1 h, at most 30 days). */
export class InviteCreateDto {
  @IsOptional()
  @IsInt({ message: 'ttl_ms must be an integer (ms)' })
  @Min(1000, { message: 'ttl_ms must be at least 1000 ms' })
  @Max(30 * 86_400_000, { message: 'ttl_ms must be at most 2592000000 ms (30 days)' })
  ttl_ms?: number;
}

/** A node's platform: each member optional. */
export class PlatformDto {
  @IsOptional()
  @IsString({ message: 'platform.os must be a string' })
  @MaxLength(64, { message: 'platform.os must be at most 64 characters' })
  os?: string;

  @IsOptional()
  @IsString({ message: 'platform.arch must be a string' })
  @MaxLength(64, { message: 'platform.arch must be at most 64 characters' })
  arch?: string;

  @IsOptional()
  @IsString({ message: 'platform.runtime_kind must be a string' })
  @MaxLength(64, { message: 'platform.runtime_kind must be at most 64 characters' })
  runtime_kind?: string;
}

class NodeAdvertDto {
  @IsString({ message: 'node_name must be a string' })
  @Length(1, 128, { message: 'node_name must be 1 to 128 characters' })
  @Matches(PRINTABLE, { message: 'node_name must not contain control characters' })
  node_name: string;

  @IsString({ message: 'fs_url must be a string' })
  @MaxLength(2048, { message: 'fs_url must be at most 2048 characters' })
  @Matches(WS_URL, { message: 'fs_url must be a ws:// or wss:// URL' })
  fs_url: string;

  @IsOptional()
  @IsObject({ message: 'platform must be an object' })
  @ValidateNested()
  @Type(() => PlatformDto)
  platform?: PlatformDto;
}

/** `control.node_join` `{invite_token, node_name, fs_url, platform?, lease_ttl_ms?}`. */
export class NodeJoinDto extends NodeAdvertDto {
  @Secret('invite_token')
  invite_token: string;

  @IsOptional()
  @LeaseTtl()
  lease_ttl_ms?: number;
}

/** `control.node_join_request` `{node_name, fs_url, platform?}`. */
export class NodeJoinRequestDto extends NodeAdvertDto {}

/** `control.node_join_status` `{request_id, request_secret}`. */
export class NodeJoinStatusDto {
  @Ident('request_id')
  request_id: string;

  @Secret('request_secret')
  request_secret: string;
}

/** `control.node_join_approve` `{request_id, lease_ttl_ms?}`. */
export class NodeJoinApproveDto {
  @Ident('request_id')
  request_id: string;

  @IsOptional()
  @LeaseTtl()
  lease_ttl_ms?: number;
}

/** `control.node_join_deny` `{request_id}`. */
export class NodeJoinDenyDto {
  @Ident('request_id')
  request_id: string;
}

/** `control.node_lease_refresh` `{node_id, node_secret, lease_ttl_ms?, fs_url?, fs_auth_token?}`. */
export class LeaseRefreshDto {
  @Ident('node_id')
  node_id: string;

  @Secret('node_secret')
  node_secret: string;

  @IsOptional()
  @LeaseTtl()
  lease_ttl_ms?: number;

  @IsOptional()
  @IsString({ message: 'fs_url must be a string' })
  @MaxLength(2048, { message: 'fs_url must be at most 2048 characters' })
  @Matches(WS_URL, { message: 'fs_url must be a ws:// or wss:// URL' })
  fs_url?: string;

  @IsOptional()
  @Secret('fs_auth_token')
  fs_auth_token?: string;
}

/**
 * `control.node_lease_release` `{node_id, node_secret}` (docs/protocol.md "Nodes"): a node stopping
 * cleanly ends its lease now, so its mounts turn `degraded` and fail over at once instead of
 * after the lease TTL. Gated by `node_secret` like `node_lease_refresh` (`node_not_found`,
 * `node_auth_failed`); the reply is `{node_id, released:true, lease_expires_at_ms}`.
 */
export class LeaseReleaseDto {
  @Ident('node_id')
  node_id: string;

  @Secret('node_secret')
  node_secret: string;
}

/** Payloads naming one node: `node_get`, `node_delete`. */
export class NodeRefDto {
  @Ident('node_id')
  node_id: string;
}

/** `control.node_service_watch` `{node_id?}`: one node, or every node when absent. */
export class NodeServiceWatchDto {
  @IsOptional()
  @Ident('node_id')
  node_id?: string;
}

/**
 * One mount of `control.project_up` (docs/protocol.md "Declarative workspaces"): its node by `node_id` or by
 * `node_name` (exactly one of them; checked by the service, which knows the nodes).
 */
export class MountSpecDto {
  /** Normalised and checked by the service (absolute, no `.`/`..`, no control characters). */
  @IsString({ message: 'mount_path must be a string' })
  mount_path: string;

  @IsOptional()
  @Ident('node_id')
  node_id?: string;

  @IsOptional()
  @IsString({ message: 'node_name must be a string' })
  @Length(1, 128, { message: 'node_name must be 1 to 128 characters' })
  @Matches(PRINTABLE, { message: 'node_name must not contain control characters' })
  node_name?: string;

  @Ident('export_name')
  export_name: string;
}

/** Largest `mounts` list of `control.project_up` (a project holds at most this many mounts). */
export const PROJECT_UP_MAX_MOUNTS = 10_000;

/**
 * `control.project_up` `{name, vision?, access_policy?, mounts, prune?, activate?, dry_run?}`
 * (docs/protocol.md "Declarative workspaces"): the declarative form of a project and its mounts.
 */
export class ProjectUpDto {
  @IsString({ message: 'name must be a string' })
  @Length(1, 256, { message: 'name must be 1 to 256 characters' })
  @Matches(PRINTABLE, { message: 'name must not contain control characters' })
  name: string;

  @IsOptional()
  @IsString({ message: 'vision must be a string' })
  @MaxLength(4096, { message: 'vision must be at most 4096 characters' })
  vision?: string;

  @IsOptional()
  @IsObject({ message: 'access_policy must be an object' })
  @ValidateNested()
  @Type(() => AccessPolicyDto)
  access_policy?: AccessPolicyDto;

  @IsArray({ message: 'mounts must be an array' })
  @ArrayMaxSize(PROJECT_UP_MAX_MOUNTS, { message: `mounts must hold at most ${PROJECT_UP_MAX_MOUNTS} entries` })
  @ValidateNested({ each: true })
  @Type(() => MountSpecDto)
  mounts: MountSpecDto[];

  /** Remove the configured mounts that `mounts` does not list (default true). */
  @IsOptional()
  @IsBoolean({ message: 'prune must be a boolean' })
  prune?: boolean;

  /** Bind the caller's agent to the project (default true). */
  @IsOptional()
  @IsBoolean({ message: 'activate must be a boolean' })
  activate?: boolean;

  /** Compute the reply and change nothing (default false). */
  @IsOptional()
  @IsBoolean({ message: 'dry_run must be a boolean' })
  dry_run?: boolean;
}

/**
 * `control.audit_list` `{since_ms?, until_ms?, actor_agent_id?, type?, limit?, cursor?}`
 * (docs/protocol.md "Audit log"): times in ms since the epoch, both bounds inclusive; `limit` 1 to 1000
 * (default 100); `cursor` is a previous reply's `next_cursor`.
 */
export class AuditListDto {
  @IsOptional()
  @IsInt({ message: 'since_ms must be an integer (ms since the epoch)' })
  @Min(0, { message: 'since_ms must not be negative' })
  since_ms?: number;

  @IsOptional()
  @IsInt({ message: 'until_ms must be an integer (ms since the epoch)' })
  @Min(0, { message: 'until_ms must not be negative' })
  until_ms?: number;

  @IsOptional()
  @Ident('actor_agent_id')
  actor_agent_id?: string;

  @IsOptional()
  @IsString({ message: 'type must be a string' })
  @Matches(/^[a-z]+\.[a-z_]{1,64}$/, { message: 'type must be a request type such as control.project_up' })
  type?: string;

  @IsOptional()
  @IsInt({ message: 'limit must be an integer' })
  @Min(1, { message: 'limit must be at least 1' })
  @Max(AUDIT_LIST_MAX_LIMIT, { message: `limit must be at most ${AUDIT_LIST_MAX_LIMIT}` })
  limit?: number;

  @IsOptional()
  @IsString({ message: 'cursor must be a string' })
  @Matches(/^[0-9]{1,19}$/, { message: 'cursor must be a next_cursor of an earlier control.audit_list reply' })
  cursor?: string;
}

/** Payloads that take nothing; members are ignored. */
export class EmptyDto {}
