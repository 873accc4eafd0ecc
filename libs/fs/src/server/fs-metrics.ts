/**
 * FS node metrics, prefix `svc_fs_`: operations by op and result
 * (`svc_fs_ops_total{op,result}`, result `ok` or the errno name, and their duration), bytes
 * read and written through handles, open FS sessions, open handles, known nodes and the node
 * ids the sessions were given (what their memory holds for events). Gauges are
 * computed when scraped. No secret or path is ever a label.
 */
import { Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';
import { getOrCreate, RequestMetrics, scrapedGauge } from '@svc/ops';
import { FsSessionService } from './fs-session';
import { NodeTable } from './node-table';

@Injectable()
export class FsMetrics {
  /** Observer handed to the envelope adapter: `svc_fs_ops_total{op,result}`, `svc_fs_ops_duration_seconds{op}`. */
  readonly requests = new RequestMetrics('svc_fs_ops', 'op', 'acheron.t_fs_');
  /** Bytes returned by `read`. */
  readonly bytesRead = getOrCreate('svc_fs_bytes_read_total', () => new Counter({ name: 'svc_fs_bytes_read_total', help: 'Bytes read through FS handles' }));
  /** Bytes stored by `write`. */
  readonly bytesWritten = getOrCreate(
    'svc_fs_bytes_written_total',
    () => new Counter({ name: 'svc_fs_bytes_written_total', help: 'Bytes written through FS handles' }),
  );

  constructor(sessions: FsSessionService, table: NodeTable) {
    scrapedGauge('svc_fs_sessions', 'Open FS sessions (after a good hello)', (g) => g.set(sessions.size));
    scrapedGauge('svc_fs_open_handles', 'Open FS handles over all sessions', (g) => g.set(sessions.openHandles()));
    scrapedGauge('svc_fs_nodes', 'Node ids currently known to the node table', (g) => g.set(table.size));
    scrapedGauge('svc_fs_session_seen_nodes', 'Node ids handed to the open sessions (the events they get), summed over sessions', (g) =>
      g.set(sessions.seenNodes()),
    );
  }
}
