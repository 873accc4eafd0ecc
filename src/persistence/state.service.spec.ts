// jest's own typed expect: its asymmetric matchers (expect.stringContaining) are not `any`
import { expect } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ProtocolError } from '@svc/protocol';
import { projectRecord as project } from '../../test/fixtures/records';
import { SqliteStateStore } from './sqlite-state.store';
import { ChangeSet } from './state.model';
import { StateService } from './state.service';

/** The real SQLite store, whose commits wait until the test lets them finish (a slow disk), or fail once. */
class GatedStore extends SqliteStateStore {
  gate: Promise<void> | null = null;
  failNext: NodeJS.ErrnoException | null = null;
  commits: ChangeSet[] = [];
  override async write(build: () => ChangeSet | null): Promise<boolean> {
    if (this.gate) await this.gate;
    return super.write(() => {
      const changes = build();
      if (changes && this.failNext) {
        const e = this.failNext;
        this.failNext = null;
        throw e;
      }
      if (changes) this.commits.push(changes);
      return changes;
    });
  }
}

describe('StateService.mutate', () => {
  let dir: string;
  let disk: GatedStore;
  let store: StateService;
  /** What a fresh process would load from the directory. */
  const reload = async () => {
    await store.close();
    const again = new StateService(new SqliteStateStore({ dir, key: null }));
    await again.open();
    const state = again.state;
    await again.close();
    store = new StateService((disk = new GatedStore({ dir, key: null })));
    await store.open();
    return state;
  };
  beforeAll(() => {
    Logger.overrideLogger(false);
  });
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'state-svc-'));
    disk = new GatedStore({ dir, key: null });
    store = new StateService(disk);
    await store.open();
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('shows a change to readers only once it is committed', async () => {
    let release!: () => void;
    disk.gate = new Promise((r) => (release = r));
    const version = store.version;
    const pending = store.mutate((s) => s.projects.put(project('p1')));
    await new Promise((r) => setTimeout(r, 20)); // the mutation has run and waits on the disk
    expect(store.state.projects.has('p1')).toBe(false);
    expect(store.version).toBe(version);
    release();
    await pending;
    expect(store.state.projects.has('p1')).toBe(true);
    expect(store.version).toBe(version + 1);
    expect((await reload()).projects.get('p1')).toEqual(project('p1'));
  });

  it('leaves memory and store as they were when the change throws half-way or cannot be committed', async () => {
    await store.mutate((s) => s.projects.put(project('keep')));
    await expect(
      store.mutate((s) => {
        s.projects.put(project('keep', 'changed'));
        s.projects.delete('keep');
        throw new ProtocolError('invalid_payload', 'no');
      }),
    ).rejects.toThrow('no');
    expect(store.state.projects.get('keep')?.name).toBe('keep');

    disk.failNext = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    await expect(store.mutate((s) => s.projects.put(project('lost')))).rejects.toMatchObject({
      code: 'internal_error',
      message: expect.stringContaining('SQLITE_FULL'),
    });
    expect(store.state.projects.has('lost')).toBe(false);
    // the next mutation works and starts from the committed state
    await store.mutate((s) => s.projects.put(project('next')));
    expect([...store.state.projects.keys()].sort()).toEqual(['keep', 'next']);
    expect([...(await reload()).projects.keys()].sort()).toEqual(['keep', 'next']);
  });

  it('commits mutations queued behind a slow commit together, each alone on its draft, and writes only what changed', async () => {
    for (let i = 0; i < 50; i++) await store.mutate((s) => s.projects.put(project(`p${i}`)));
    let release!: () => void;
    disk.gate = new Promise((r) => (release = r));
    disk.commits = [];
    const first = store.mutate((s) => s.projects.put(project('a')));
    await new Promise((r) => setTimeout(r, 10));
    const queued = [
      store.mutate((s) => s.projects.put(project('b'))),
      store.mutate((s) => {
        s.projects.put(project('c'));
        throw new ProtocolError('invalid_payload', 'dropped');
      }),
      store.mutate((s) => s.projects.put({ ...s.projects.get('b')!, name: 'b2' })),
    ];
    release();
    await first;
    await expect(queued[0]).resolves.toBeDefined();
    await expect(queued[1]).rejects.toThrow('dropped');
    await expect(queued[2]).resolves.toBeDefined();
    // two transactions: 'a' alone, then 'b' (as changed by the third) without 'c'
    expect(disk.commits.map((c) => [...(c.projects?.keys() ?? [])])).toEqual([['a'], ['b']]);
    expect(store.state.projects.get('b')?.name).toBe('b2');
    expect(store.state.projects.has('c')).toBe(false);
  });
});
