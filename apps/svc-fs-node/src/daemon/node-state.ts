/**
 * The daemon's state file (`--state-file`, default `./.svc-fs-node-state.json`, mode 0600):
 * the node's credentials once paired, or the pending join request while waiting for approval.
 * Written atomically (temp file, fsync, rename, directory fsync).
 */
import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '@svc/ops';
import type { NodeCredentials } from '@svc/protocol';

export interface NodeStateData {
  /** The control plane these credentials belong to. */
  control_url: string;
  credentials: NodeCredentials | null;
  /** A join request waiting for approval (request mode). */
  pending_request: { request_id: string; request_secret: string; requested_at_ms: number } | null;
  updated_at_ms: number;
}

/** A state file that exists but cannot be used. */
export class NodeStateError extends Error {}

export class NodeStateFile {
  constructor(readonly path: string) {}

  /**
   * @returns the saved state, or null when there is no file
   * @throws NodeStateError when the file is unreadable or malformed
   */
  async load(): Promise<NodeStateData | null> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new NodeStateError(`cannot read ${this.path}: ${(e as Error).message}`);
    }
    try {
      const data = JSON.parse(text) as NodeStateData;
      if (typeof data.control_url !== 'string') throw new Error('control_url missing');
      return {
        control_url: data.control_url,
        credentials: data.credentials ?? null,
        pending_request: data.pending_request ?? null,
        updated_at_ms: data.updated_at_ms ?? 0,
      };
    } catch (e) {
      throw new NodeStateError(`${this.path} is not a valid node state file (${(e as Error).message}); move it away to pair again`);
    }
  }

  /** Durably replaces the file with `data` (mode 0600). */
  async save(data: NodeStateData): Promise<void> {
    await writeFileAtomic(this.path, `${JSON.stringify(data, null, 2)}\n`);
  }
}
