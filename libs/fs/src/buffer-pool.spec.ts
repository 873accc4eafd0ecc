import { BufferPool } from './buffer-pool';

describe('BufferPool', () => {
  it('hands out buffers of its size and reuses released ones', () => {
    const pool = new BufferPool(1024, 2);
    const a = pool.acquire();
    expect(a.length).toBe(1024);
    pool.release(a);
    expect(pool.available).toBe(1);
    expect(pool.acquire()).toBe(a);
    expect(pool.available).toBe(0);
  });

  it('ignores a second release of the same buffer (it would go to two users)', () => {
    const pool = new BufferPool(64, 4);
    const a = pool.acquire();
    pool.release(a);
    pool.release(a);
    expect(pool.available).toBe(1);
    const x = pool.acquire();
    const y = pool.acquire();
    expect(x).not.toBe(y);
  });

  it('keeps at most maxFree buffers and refuses foreign sizes', () => {
    const pool = new BufferPool(64, 1);
    const a = pool.acquire();
    const b = pool.acquire();
    pool.release(a);
    pool.release(b);
    pool.release(Buffer.alloc(32));
    expect(pool.available).toBe(1);
  });
});
