/** `@svc/protocol`: the wire definitions ({@link ./wire}) plus the payload DTOs and their validation. */
export * from './wire';
export * from './validation';
export * from './dto/control.dto';
