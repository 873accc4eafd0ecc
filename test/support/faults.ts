/**
 * What the fault e2e tests (test/faults.e2e-spec.ts) and the fault bench (bench/faults.bench.ts)
 * share around a running `svc`: its readiness, timed, and sessions that mutate in a loop while
 * recording what was acknowledged. (Their node daemons start with `startNodeDaemon` of
 * test/support/processes.ts.)
 */
import { ControlClient } from '../../libs/client/src';
import { Running, sleep } from './processes';

/** The status of `GET /readyz` on the ops endpoint of `r` (-1 when it does not answer within 1 s). */
export async function readyz(r: Running): Promise<number> {
  try {
    return (await fetch(`${r.opsUrl}/readyz`, { signal: AbortSignal.timeout(1000) })).status;
  } catch {
    return -1;
  }
}

/** Polls /readyz of `r` every 25 ms until it answers `status`; resolves the time it took from `t0`, ms. */
export async function timeTo(r: Running, status: number, t0: number, limitMs: number): Promise<number> {
  for (;;) {
    if ((await readyz(r)) === status) return Date.now() - t0;
    if (Date.now() - t0 > limitMs) throw new Error(`/readyz of ${r.url} did not answer ${status} within ${limitMs} ms`);
    await sleep(25);
  }
}

/** Sessions creating projects in a loop; acknowledged ids and refusal codes are recorded. */
export class Mutators {
  readonly acked = new Set<string>();
  /** Acknowledged ids per client, in the order of `clients`. */
  readonly ackedBy: Array<Set<string>> = [];
  readonly refusals = new Map<string, number>();
  private running = true;
  private readonly loops: Promise<void>[] = [];
  private n = 0;

  constructor(clients: ControlClient[], prefix: string) {
    for (const [i, c] of clients.entries()) {
      this.ackedBy.push(new Set());
      this.loops.push(this.loop(c, `${prefix}-${i}`, this.ackedBy[i]));
    }
  }

  private async loop(c: ControlClient, name: string, mine: Set<string>): Promise<void> {
    while (this.running) {
      try {
        const p = await c.request<{ project_id: string }>('project_create', { name: `${name}-${this.n++}` });
        this.acked.add(p.project_id);
        mine.add(p.project_id);
      } catch (e) {
        const code = (e as { code?: string }).code ?? (e as Error).message;
        this.refusals.set(code, (this.refusals.get(code) ?? 0) + 1);
      }
      await sleep(10);
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
  }
}

/** The acknowledged ids in `acked` that `project_list` on `c` does not show. */
export async function missingProjects(c: ControlClient, acked: Iterable<string>): Promise<string[]> {
  const { projects } = await c.request<{ projects: Array<{ project_id: string }> }>('project_list');
  const listed = new Set(projects.map((p) => p.project_id));
  return [...acked].filter((id) => !listed.has(id));
}
