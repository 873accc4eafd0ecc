/**
 * A small free list of equal-sized buffers for the data path: the node's read replies (a 1 MiB
 * read takes a buffer, the bytes are read into it, the binary frame is completed around them in
 * place, and the buffer comes back once the WebSocket has handed the frame to the kernel) and
 * the FUSE layer's write-behind chunks (filled by the kernel's writes, sent with the frame
 * completed in place, back once the node acknowledged them). It spares a 1 MiB allocation per
 * request (and the GC work of that external memory).
 *
 * Rule: a buffer is released exactly once, when nothing refers to it any more; {@link acquire}
 * never hands out a buffer that is still free-listed.
 */
export class BufferPool {
  private readonly free: Buffer[] = [];

  /**
   * @param size bytes of every buffer
   * @param maxFree most buffers kept on the free list (others are left to the GC)
   */
  constructor(
    readonly size: number,
    private readonly maxFree: number,
  ) {}

  /** A buffer of {@link size} bytes with unspecified content (from the free list, or new). */
  acquire(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafeSlow(this.size);
  }

  /** Gives a buffer obtained from {@link acquire} back; it must not be used afterwards. */
  release(buf: Buffer): void {
    // A second release of one buffer would hand it to two readers at once: ignored.
    if (buf.length === this.size && this.free.length < this.maxFree && !this.free.includes(buf)) this.free.push(buf);
  }

  /** Buffers on the free list. */
  get available(): number {
    return this.free.length;
  }
}
