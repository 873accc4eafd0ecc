import { Logger } from '@nestjs/common';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ProtocolError } from '@svc/protocol';
import { FileStateStore } from './file-state.store';
import { ProjectRecord } from './state.model';
import { StateService } from './state.service';

/** The real file store, whose saves wait until the test lets them finish (a slow disk). */
class GatedStore extends FileStateStore {
  gate: Promise<void> | null = null;
  failNext: NodeJS.ErrnoException | null = null;
  async save(json: string): Promise<void> {
    if (this.gate) await this.gate;
    if (this.failNext) {
      const e = this.failNext;
      this.failNext = null;
      throw e;
    }
    return super.save(json);
  }
}

const project = (id: string): ProjectRecord => ({
  project_id: id,
  name: id,
  vision: '',
  access_policy: { invoke: 'deny' },
  token_sha256: null,
  token_updated_at_ms: 0,
  mounts: [],
  created_at_ms: 0,
  updated_at_ms: 0,
});

describe('StateService.mutate', () => {
  let dir: string;
  let disk: GatedStore;
  let store: StateService;
  beforeAll(() => Logger.overrideLogger(false));
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'state-svc-'));
    disk = new GatedStore(dir, null);
    store = new StateService(disk);
    await store.open();
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('shows a change to readers only once its snapshot is durable', async () => {
    let release!: () => void;
    disk.gate = new Promise((r) => (release = r));
    const version = store.version;
    const pending = store.mutate((s) => s.projects.set('p1', project('p1')));
    await new Promise((r) => setTimeout(r, 20)); // the mutation has run and waits on the disk
    expect(store.state.projects.has('p1')).toBe(false);
    expect(store.version).toBe(version);
    expect(await disk.load()).toBeNull();
    release();
    await pending;
    expect(store.state.projects.has('p1')).toBe(true);
    expect(store.version).toBe(version + 1);
    expect((await disk.load())!.state).toMatchObject({ projects: [{ project_id: 'p1' }] });
  });

  it('leaves memory and disk as they were when the change throws half-way or cannot be saved', async () => {
    await store.mutate((s) => s.projects.set('keep', project('keep')));
    await expect(
      store.mutate((s) => {
        s.projects.get('keep')!.name = 'changed';
        s.projects.delete('keep');
        throw new ProtocolError('invalid_payload', 'no');
      }),
    ).rejects.toThrow('no');
    expect(store.state.projects.get('keep')?.name).toBe('keep');

    disk.failNext = Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
    await expect(store.mutate((s) => s.projects.set('lost', project('lost')))).rejects.toMatchObject({ code: 'internal_error' });
    expect(store.state.projects.has('lost')).toBe(false);
    expect((await disk.load())!.state).toMatchObject({ projects: [{ project_id: 'keep', name: 'keep' }] });
    // the next mutation works and starts from the committed state
    await store.mutate((s) => s.projects.set('next', project('next')));
    expect([...store.state.projects.keys()]).toEqual(['keep', 'next']);
  });
});
