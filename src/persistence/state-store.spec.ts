// jest's own typed expect: its asymmetric matchers (expect.objectContaining) are not `any`
import { expect } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PostgresStateStore } from './postgres-state.store';
import { SqliteStateStore } from './sqlite-state.store';
import { StateStore, StoreNotOpenError, StoreUnavailableError } from './state-store.port';

/** What a store that is not open must answer to each operation that needs the database. */
async function expectNotOpen(store: StateStore): Promise<void> {
  let built = false;
  const build = () => {
    built = true;
    return null;
  };
  for (const attempt of [() => store.write(build), () => store.queryAudit({ limit: 10 })]) {
    const error = await attempt().then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StoreNotOpenError);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).toEqual(expect.objectContaining({ code: 'STORE_NOT_OPEN', message: 'the state store is not open' }));
  }
  expect(built).toBe(false);
  await expect(store.sync()).resolves.toBeUndefined();
  await expect(store.pruneAudit({ minTsMs: Date.now(), maxEntries: 1 })).resolves.toBe(0);
}

describe('a StateStore that is not open', () => {
  let dir: string;
  beforeAll(() => {
    Logger.overrideLogger(false);
  });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-store-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('SQLite: refuses writes and audit queries with StoreNotOpenError before open and after close', async () => {
    const store = new SqliteStateStore({ dir, key: null });
    await expectNotOpen(store);
    await store.open(() => undefined);
    await expect(store.write(() => null)).resolves.toBe(false);
    await store.close();
    await expectNotOpen(store);
  });

  it('PostgreSQL: refuses writes and audit queries with StoreNotOpenError before open and after close', async () => {
    // never connects: the guard answers before any statement
    const store = new PostgresStateStore({ url: 'postgres://svc@127.0.0.1:1/svc', key: null });
    await expectNotOpen(store);
    await store.close();
    await expectNotOpen(store);
  });
});
