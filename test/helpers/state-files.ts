/**
 * Looking at a state directory from outside, whatever store wrote it: every file's bytes
 * (to prove a refused start changed and created nothing) and searches of every file for
 * secrets in the forms they could be written in.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/** One entry of {@link listTree}: a directory, or a file with its size and SHA-256. */
export interface TreeEntry {
  type: 'dir' | 'file' | 'other';
  size?: number;
  sha256?: string;
}

/** Every entry under `dir`, recursively, keyed by its path relative to `dir`. */
export function listTree(dir: string): Record<string, TreeEntry> {
  const out: Record<string, TreeEntry> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      const st = statSync(p);
      const rel = relative(dir, p);
      if (st.isDirectory()) {
        out[rel] = { type: 'dir' };
        walk(p);
      } else if (st.isFile()) {
        const bytes = readFileSync(p);
        out[rel] = { type: 'file', size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') };
      } else {
        out[rel] = { type: 'other' };
      }
    }
  };
  walk(dir);
  return out;
}

/** Every regular file under `dir`, recursively (absolute paths). */
export function filesUnder(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      else if (st.isFile()) out.push(p);
    }
  };
  walk(dir);
  return out;
}

/**
 * The byte patterns under which `secret` could sit in a file: UTF-8, UTF-16LE, hex (both
 * cases) and base64 / base64url of its UTF-8 bytes at each of the three byte alignments it can
 * have inside a longer encoded run (the part of the encoding that does not depend on the
 * neighbouring bytes), and, when the secret is itself base64url of at least 16 bytes (tokens),
 * those raw bytes too.
 */
export function encodedForms(secret: string): Array<{ form: string; bytes: Buffer }> {
  const utf8 = Buffer.from(secret, 'utf8');
  const forms: Array<{ form: string; bytes: Buffer }> = [
    { form: 'utf8', bytes: utf8 },
    { form: 'utf16le', bytes: Buffer.from(secret, 'utf16le') },
    { form: 'hex', bytes: Buffer.from(utf8.toString('hex'), 'latin1') },
    { form: 'HEX', bytes: Buffer.from(utf8.toString('hex').toUpperCase(), 'latin1') },
  ];
  for (let shift = 0; shift < 3; shift++) {
    const b64 = Buffer.concat([Buffer.alloc(shift), utf8])
      .toString('base64')
      .replace(/=+$/, '');
    // drop the leading group that holds neighbour bytes and the trailing partial group
    const fullGroups = Math.floor((shift + utf8.length) / 3);
    const core = b64.slice(shift === 0 ? 0 : 4, fullGroups * 4);
    if (core.length < 16) continue;
    forms.push({ form: `base64@${shift}`, bytes: Buffer.from(core, 'latin1') });
    const url = core.replace(/\+/g, '-').replace(/\//g, '_');
    if (url !== core) forms.push({ form: `base64url@${shift}`, bytes: Buffer.from(url, 'latin1') });
  }
  if (/^[A-Za-z0-9_-]+$/.test(secret)) {
    const raw = Buffer.from(secret, 'base64url');
    if (raw.length >= 16) forms.push({ form: 'base64url-decoded', bytes: raw });
  }
  return forms;
}

/**
 * Searches the raw bytes of every file under `dir` for every form of every secret.
 * @param secrets label -> secret text
 * @returns one line per hit, `<file>: <label> as <form>` (empty: nothing found)
 */
export function findSecrets(dir: string, secrets: Record<string, string>): string[] {
  const hits: string[] = [];
  const patterns = Object.entries(secrets).flatMap(([label, s]) => encodedForms(s).map((f) => ({ label, ...f })));
  for (const file of filesUnder(dir)) {
    const bytes = readFileSync(file);
    for (const p of patterns) {
      if (bytes.includes(p.bytes)) hits.push(`${relative(dir, file)}: ${p.label} as ${p.form}`);
    }
  }
  return hits;
}
