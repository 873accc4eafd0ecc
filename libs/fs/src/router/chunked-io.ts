/**
 * Chunked I/O on one remote handle (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)" `max_read` / `max_write`): a read or write
 * larger than the session allows is split into requests that are all in flight at once, and a
 * short write is continued until every byte is written. Whole-file streaming over the router
 * is `./transfer`.
 */
import { FramedData, framedBytes, FsClient, isFramedData } from '@svc/client';
import { Errno, FsError } from '@svc/protocol/wire';

/**
 * Reads up to `len` bytes at byte offset `off` of handle `h`: one request when `len` fits in
 * `client.maxRead`, else `maxRead`-sized requests in flight together, joined in order up to
 * the first short or EOF piece.
 * @returns the bytes (shorter than `len` only at end of file) and whether EOF was reached
 * @throws FsError from the node (EBADF, EIO, ...), ConnectionError when the session fails
 */
export async function readChunks(client: FsClient, h: number, off: number, len: number): Promise<{ data: Buffer; eof: boolean }> {
  const max = client.maxRead;
  if (len <= max) return client.read(h, off, len);
  const sizes: number[] = [];
  const parts: Array<Promise<{ data: Buffer; eof: boolean }>> = [];
  for (let o = 0; o < len; o += max) {
    sizes.push(Math.min(max, len - o));
    parts.push(client.read(h, off + o, sizes[sizes.length - 1]));
  }
  const results = await Promise.all(parts);
  const bufs: Buffer[] = [];
  let eof = false;
  for (let i = 0; i < results.length; i++) {
    bufs.push(results[i].data);
    if (results[i].eof || results[i].data.length < sizes[i]) {
      eof = results[i].eof;
      break;
    }
  }
  return { data: bufs.length === 1 ? bufs[0] : Buffer.concat(bufs), eof };
}

/**
 * Writes all of `input` at byte offset `off` of handle `h`: {@link FramedData} that fits in
 * one request goes out as is (no copy); anything else is split into `client.maxWrite`-sized
 * requests in flight together (an empty write is one request).
 * @param path the workspace path, for error messages
 * @returns bytes written (all of them unless an error is thrown)
 * @throws FsError EIO when the node writes 0 bytes, FsError from the node (ENOSPC, EBADF, ...),
 *   ConnectionError when the session fails
 */
export async function writeChunks(client: FsClient, h: number, path: string, off: number, input: Uint8Array | FramedData): Promise<number> {
  const max = client.maxWrite;
  if (isFramedData(input) && input.len > max) input = framedBytes(input);
  if (isFramedData(input)) return writeFully(client, h, path, off, input);
  const data = input;
  const parts: Array<Promise<number>> = [];
  for (let o = 0; o < data.length || (o === 0 && data.length === 0); o += max) {
    const chunk = data.subarray(o, Math.min(data.length, o + max));
    parts.push(writeFully(client, h, path, off + o, chunk));
    if (data.length === 0) break;
  }
  const ns = await Promise.all(parts);
  return ns.reduce((a, b) => a + b, 0);
}

/**
 * Writes all of `data` at `off` (more requests after a short write); framed data goes out as is first.
 * @returns bytes written
 * @throws FsError EIO when the node writes 0 bytes of a non-empty request
 */
async function writeFully(client: FsClient, h: number, path: string, off: number, data: Uint8Array | FramedData): Promise<number> {
  const length = isFramedData(data) ? data.len : data.length;
  let done = 0;
  do {
    const n = done === 0 ? await client.write(h, off, data) : await client.write(h, off + done, (isFramedData(data) ? framedBytes(data) : data).subarray(done));
    if (n <= 0 && length > 0) throw new FsError(Errno.EIO, `${path}: the node wrote 0 bytes`);
    done += n;
  } while (done < length);
  return done;
}
