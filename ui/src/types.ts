/**
 * The records the dashboard reads. The control protocol's records are imported, type-only, from
 * their one definition (libs/protocol/src/records.ts, through ui/tsconfig.protocol.json); the
 * types declared here are the dashboard's own views of payloads and the records of other
 * modules it shows, with only the fields it uses.
 */
import type { MountView as ProtocolMountView, WorkspaceStatus as ProtocolWorkspaceStatus } from '../../libs/protocol/src/records';

export type {
  AuditEntry,
  Availability,
  AvailabilityEvent,
  CatalogEvent,
  DriftItem,
  MountState,
  NodeInfo,
  PendingJoin,
  ProjectSummary,
} from '../../libs/protocol/src/records';

/** A MountView as the dashboard holds it: `auth_token` is dropped on receipt and never shown. */
export type MountView = Omit<ProtocolMountView, 'auth_token'>;

/**
 * The WorkspaceStatus of one project as `/projects/<id>/STATUS.json` gives it to an admin
 * (`project_id` set), with the fields the dashboard reads and its mounts as {@link MountView}s.
 */
export type WorkspaceStatus = Pick<ProtocolWorkspaceStatus, 'revision' | 'drift' | 'availability'> & {
  project_id: string;
  mounts: MountView[];
  desired_mounts: MountView[];
};

/** The fields of a catalog service entry (`ServiceEntry` of libs/protocol/src/catalog.ts) the dashboard shows. */
export interface ServiceEntry {
  service_id: string;
  kind: string;
  state: string;
}
