import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileStateStore } from './file-state.store';
import { StateLoadError } from './state-store.port';

const KEY = Buffer.alloc(32, 7);
let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'store-'))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('FileStateStore', () => {
  it('round-trips plaintext and encrypted snapshots, with a fresh nonce per write', async () => {
    const plain = new FileStateStore(dir, null);
    await plain.save('{"version":1,"x":"secret-value"}');
    expect(await plain.load()).toEqual({ state: { version: 1, x: 'secret-value' }, needsRewrite: false });
    expect(await new FileStateStore(dir, KEY).load()).toMatchObject({ needsRewrite: true });

    const enc = new FileStateStore(dir, KEY);
    await enc.save('{"version":1,"x":"secret-value"}');
    const first = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8'));
    expect(JSON.stringify(first)).not.toContain('secret-value');
    await enc.save('{"version":1,"x":"secret-value"}');
    const second = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8'));
    expect(second.encryption.iv).not.toBe(first.encryption.iv);
    expect(await enc.load()).toEqual({ state: { version: 1, x: 'secret-value' }, needsRewrite: false });
  });

  it('refuses a wrong key, a missing key and a tampered ciphertext', async () => {
    await new FileStateStore(dir, KEY).save('{"version":1}');
    await expect(new FileStateStore(dir, Buffer.alloc(32, 8)).load()).rejects.toThrow(StateLoadError);
    await expect(new FileStateStore(dir, null).load()).rejects.toThrow(/is encrypted/);
    const doc = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8'));
    const ct = Buffer.from(doc.ciphertext, 'base64');
    ct[0] ^= 1;
    doc.ciphertext = ct.toString('base64');
    writeFileSync(join(dir, 'state.json'), JSON.stringify(doc));
    await expect(new FileStateStore(dir, KEY).load()).rejects.toThrow(/cannot decrypt/);
  });

  it('takes over a lock left by a dead process and removes interrupted temp files', async () => {
    writeFileSync(join(dir, 'state.lock'), JSON.stringify({ pid: 999_999_99, hostname: require('node:os').hostname(), started_at_ms: 0 }));
    writeFileSync(join(dir, 'state.json.tmp-1-1'), 'partial');
    const store = new FileStateStore(dir, null);
    const waited: string[] = [];
    await store.acquire((h) => waited.push(h));
    expect(waited).toEqual([]);
    expect(JSON.parse(readFileSync(join(dir, 'state.lock'), 'utf8')).pid).toBe(process.pid);
    expect(() => readFileSync(join(dir, 'state.json.tmp-1-1'))).toThrow();
    await store.release();
    expect(() => readFileSync(join(dir, 'state.lock'))).toThrow();
  });
});
