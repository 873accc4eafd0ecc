/**
 * Whole-file transfers over a {@link WorkspaceRouter} with several requests in flight and
 * bounded memory (`cat` of a 2 GiB file must not need 2 GiB).
 */
import { Readable, Writable } from 'node:stream';
import type { FramedData } from '@svc/client';
import { BINARY_HEADER_ROOM, Errno, FsError } from '@svc/protocol/wire';
import { BufferPool } from '../buffer-pool';
import { OpenFlags } from './fs-types';
import { WorkspaceRouter } from './workspace-router';

/** Transfer tuning. */
export interface TransferOptions {
  /** Bytes per request (default 1 MiB = docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" max_read/max_write). */
  chunkBytes?: number;
  /** Requests in flight (default 8 for reads, 4 for writes); memory is about chunkBytes x inFlight. */
  inFlight?: number;
  /** Writes: fsync before closing (default false: like cp, the data is handed to the node's OS). */
  fsync?: boolean;
}

const DEFAULT_CHUNK = 1024 * 1024;

/** Resolves when `out` can take more data, or is closed or broken (listeners removed either way). */
function drained(out: Writable): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      out.off('drain', done);
      out.off('close', done);
      out.off('error', done);
      resolve();
    };
    out.on('drain', done);
    out.on('close', done);
    out.on('error', done);
  });
}

/**
 * Streams a file to `out` in order: one read first (small files cost one request, the open's
 * when the node granted `open_read`), then up to
 * `inFlight` reads ahead. Waits for `drain` when `out` is full; stops quietly when `out` is
 * closed by its reader (EPIPE).
 * @returns bytes written to `out`
 * @throws FsError from open/read (ENOENT, EISDIR, EACCES, MountUnavailableError, ...)
 */
export async function readFileTo(router: WorkspaceRouter, path: string, out: Writable, options: TransferOptions = {}): Promise<number> {
  const chunk = options.chunkBytes ?? DEFAULT_CHUNK;
  const inFlight = Math.max(1, options.inFlight ?? 8);
  // With open_read the first chunk comes with the open: a file up to one chunk is one round trip.
  const { fh } = await router.open(path, OpenFlags.O_RDONLY, { readBytes: chunk });
  let broken = false;
  const onError = () => {
    broken = true;
  };
  out.on('error', onError);
  const queue: Array<{ off: number; p: Promise<{ data: Buffer; eof: boolean }> }> = [];
  const issue = (off: number) => {
    const p = router.read(fh, off, chunk);
    p.catch(() => undefined);
    queue.push({ off, p });
  };
  let total = 0;
  try {
    let next = 0;
    issue(next);
    next += chunk;
    while (queue.length > 0 && !broken) {
      const { off, p } = queue.shift()!;
      let { data, eof } = await p;
      let pos = off + data.length;
      // A short read before the end of the file: read the rest of this chunk first.
      while (!eof && data.length > 0 && pos < off + chunk) {
        const more = await router.read(fh, pos, off + chunk - pos);
        if (more.data.length === 0) {
          eof = more.eof;
          if (!eof) throw new FsError(Errno.EIO, `${path}: empty read before the end of file`);
          break;
        }
        data = Buffer.concat([data, more.data]);
        pos += more.data.length;
        eof = more.eof;
      }
      if (data.length > 0) {
        total += data.length;
        if (!out.write(data) && !broken) await drained(out);
      }
      if (eof || data.length === 0) break;
      while (queue.length < inFlight) {
        issue(next);
        next += chunk;
      }
    }
  } finally {
    await Promise.allSettled(queue.map((q) => q.p));
    out.off('error', onError);
    await router.release(fh).catch(() => undefined);
  }
  return total;
}

/**
 * Opens `path` for writing from offset 0: creates it (mode 0644) or, when it exists,
 * truncates it.
 * @returns the router file handle
 */
export async function openForWrite(router: WorkspaceRouter, path: string): Promise<number> {
  try {
    return (await router.create(path, 0o644, OpenFlags.O_WRONLY | OpenFlags.O_TRUNC)).fh;
  } catch (e) {
    if (!(e instanceof FsError) || e.errno !== Errno.EEXIST) throw e;
    return (await router.open(path, OpenFlags.O_WRONLY | OpenFlags.O_TRUNC)).fh;
  }
}

/**
 * Writes `input` (bytes, or a stream read as it comes) to `path`, replacing its content:
 * chunks of `chunkBytes` with up to `inFlight` writes outstanding, then (with `fsync`) fsync,
 * and close.
 * @returns bytes written
 * @throws FsError from create/open/write (EROFS, ENOENT, EIO, ...)
 */
export async function writeFileFrom(router: WorkspaceRouter, path: string, input: Uint8Array | Readable, options: TransferOptions = {}): Promise<number> {
  const chunk = options.chunkBytes ?? DEFAULT_CHUNK;
  const inFlight = Math.max(1, options.inFlight ?? 4);
  const fh = await openForWrite(router, path);
  const pending = new Set<Promise<number>>();
  let failure: unknown = null;
  let off = 0;
  // Stream input is gathered into pooled blocks with room for the frame header in front, so
  // the binary data path sends each chunk without copying it again (FramedData).
  const blocks = new BufferPool(BINARY_HEADER_ROOM + chunk, inFlight + 1);
  const send = async (data: Uint8Array | FramedData, block?: Buffer) => {
    while (pending.size >= inFlight) await Promise.race(pending);
    // eslint-disable-next-line @typescript-eslint/only-throw-error -- rethrows what an earlier write threw, as it was
    if (failure) throw failure;
    const p = router.write(fh, off, data);
    off += data instanceof Uint8Array ? data.length : data.len;
    pending.add(p);
    p.then(
      () => pending.delete(p),
      (e) => {
        pending.delete(p);
        failure ??= e;
      },
    ).finally(() => block && blocks.release(block));
  };
  try {
    if (input instanceof Uint8Array) {
      for (let o = 0; o < input.length; o += chunk) await send(input.subarray(o, Math.min(input.length, o + chunk)));
    } else {
      let buf = blocks.acquire();
      let fill = 0;
      for await (const piece of input as AsyncIterable<Buffer | string>) {
        let b = typeof piece === 'string' ? Buffer.from(piece) : piece;
        while (b.length > 0) {
          const n = Math.min(b.length, chunk - fill);
          b.copy(buf, BINARY_HEADER_ROOM + fill, 0, n);
          fill += n;
          b = b.subarray(n);
          if (fill === chunk) {
            await send({ buf, len: fill }, buf);
            buf = blocks.acquire();
            fill = 0;
          }
        }
      }
      if (fill > 0) await send({ buf, len: fill }, buf);
    }
    await Promise.allSettled([...pending]);
    // eslint-disable-next-line @typescript-eslint/only-throw-error -- rethrows what a write threw, as it was
    if (failure) throw failure;
    if (options.fsync) await router.fsync(fh);
  } catch (e) {
    await Promise.allSettled([...pending]);
    await router.release(fh).catch(() => undefined);
    throw e;
  }
  await router.release(fh);
  return off;
}
