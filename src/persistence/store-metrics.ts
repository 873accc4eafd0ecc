/**
 * Metrics of the state store that every engine exports (docs/operations.md "Health and metrics"), so a
 * dashboard's queries find them in either mode: `svc_sweeper_leader` (1 while this process
 * runs the availability sweep; the embedded store's one process always does once loaded) and
 * `svc_store_replication_lag_seconds` (time from a commit on another replica to its replay
 * here; never observed with the embedded store, which has no other replica).
 */
import { Gauge, Histogram } from 'prom-client';
import { getOrCreate } from '@svc/ops';

/** The `svc_sweeper_leader` gauge (0 or 1). */
export function sweeperLeaderGauge(): Gauge {
  return getOrCreate('svc_sweeper_leader', () => new Gauge({ name: 'svc_sweeper_leader', help: '1 while this replica runs the availability sweep' }));
}

/** The `svc_store_replication_lag_seconds` histogram, seconds. */
export function replicationLagHistogram(): Histogram {
  return getOrCreate(
    'svc_store_replication_lag_seconds',
    () =>
      new Histogram({
        name: 'svc_store_replication_lag_seconds',
        help: 'Time from a commit on another replica to its replay here',
        buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      }),
  );
}
