import { mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { utimesSeconds } from './local-dir.backend';

describe('utimesSeconds', () => {
  let dir: string;
  beforeAll(() => (dir = mkdtempSync(join(tmpdir(), 'utimes-'))));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('lands ms and µs times exactly on disk, though ns numbers above 2^53 are inexact', () => {
    const file = join(dir, 'f');
    writeFileSync(file, 'x');
    for (const ns of [1_650_000_000_123_000_000, 1_650_000_000_250_000_000, 1_700_000_000_999_999_000, 1_000_000, 0]) {
      utimesSync(file, utimesSeconds(ns), utimesSeconds(ns));
      expect(statSync(file, { bigint: true }).mtimeNs).toBe(BigInt(Math.round(ns / 1000)) * 1000n);
    }
  });
});
