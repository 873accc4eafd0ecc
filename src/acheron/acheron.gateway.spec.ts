/**
 * Unit tests of the runtime session state (acheron.gateway.ts): the files a session leaves open
 * are closed when it ends, and a close that fails there (its node is gone) is not an unhandled
 * rejection, which would end the process.
 */
import 'reflect-metadata';
import { EventEmitter } from 'node:events';
import type { WsSession } from '@svc/transport';
import { runtimeLocals } from './acheron.gateway';
import type { RoutedHandle } from './node-routes.service';

/** A handle whose close fails, as a routed close does when the node's session is gone; and its close. */
function failingHandle(): { routed: RoutedHandle; close: jest.Mock<Promise<void>, []> } {
  const close = jest.fn(() => Promise.reject(new Error('connection closed')));
  const routed: RoutedHandle = {
    read: () => Promise.reject(new Error('not read here')),
    write: () => Promise.reject(new Error('not written here')),
    close,
  };
  return { routed, close };
}

it('closes the open files of a session that ends; a close that fails is not an unhandled rejection', async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const session = Object.assign(new EventEmitter(), { locals: new Map<unknown, unknown>() }) as unknown as WsSession;
    const locals = runtimeLocals(session);
    const handles = [failingHandle(), failingHandle()];
    handles.forEach(({ routed }, i) => locals.fids.set(i, { path: ['f'], type: 'file', open: { mode: 'r', routed } }));
    session.emit('close');
    await new Promise((r) => setImmediate(r));
    for (const { close } of handles) expect(close).toHaveBeenCalledTimes(1);
    expect(locals.fids.size).toBe(0);
    expect(unhandled).toEqual([]);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});
