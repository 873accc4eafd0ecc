/**
 * The data a gateway handler receives for one request frame. The adapter creates one per
 * frame; `@Payload()`, `@Frame()` and `@Session()` read from it, and the exception filter
 * records the mapped error on it so the adapter sends exactly one reply.
 */
import { Frame, ProtocolError } from '@svc/protocol';
import type { WsSession } from './session';

export class RequestContext {
  /** Set by {@link EnvelopeExceptionFilter} when the handler (or a guard or pipe) threw. */
  error?: ProtocolError;
  /** Set by a handler that has sent its own reply (e.g. a binary frame): the adapter sends none. */
  replied = false;

  constructor(
    readonly frame: Frame,
    readonly session: WsSession,
  ) {}
}

/** Observes every answered request, for metrics: `type` is a known type or `invalid`/`unknown`. */
export interface RequestObserver {
  /**
   * @param type the request type, bounded to handled types (`invalid` for envelope errors, `unknown` for unknown types)
   * @param result `ok` or the error code
   * @param seconds time from frame receipt to reply, seconds
   */
  observe(type: string, result: string, seconds: number): void;
}
