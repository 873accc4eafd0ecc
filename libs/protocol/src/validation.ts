/**
 * Payload validation with class-validator DTOs (docs/protocol.md "Envelope and errors": `invalid_payload` names the
 * field, `missing_field` for an absent required field). Prototype keys (`__proto__`,
 * `constructor`, `prototype`) never reach this point: the envelope parser refuses them in
 * every request ({@link ./envelope}, {@link ./forbidden-keys}).
 */
import { plainToInstance } from 'class-transformer';
import { ValidationError, validateSync } from 'class-validator';
import { ProtocolError } from './errors';

/** Re-exported for the users of this module (also in `./wire`). */
export { forbiddenKeyPath } from './forbidden-keys';

/** A DTO class: constructible without arguments, decorated with class-validator rules. */
export type DtoClass<T> = new () => T;

/**
 * class-validator constraints that check a member's JSON type, in the order they are preferred
 * when several fail. A value of the wrong type fails most other constraints of its member too
 * (`{"name":5}` is neither a string, nor 1 to 256 characters, nor free of control characters):
 * the type constraint's message is the one reported, whatever the order of the decorators.
 */
export const TYPE_CONSTRAINTS: readonly string[] = ['isString', 'isInt', 'isNumber', 'isBoolean', 'isObject', 'isArray'];

/**
 * The message a failed member reports: that of its type constraint when that one failed,
 * else that of the first constraint that failed (class-validator runs them in the reverse
 * order of the decorators above a member).
 */
function messageOf(constraints: Record<string, string>): string | undefined {
  for (const type of TYPE_CONSTRAINTS) if (constraints[type] !== undefined) return constraints[type];
  return Object.values(constraints)[0];
}

/** The wire path of a member: `a.b` for an object member, `a[0]` for an array element. */
function memberPath(prefix: string, property: string): string {
  if (/^\d+$/.test(property) && prefix) return `${prefix}[${property}]`;
  return prefix ? `${prefix}.${property}` : property;
}

function firstFailure(errors: ValidationError[], prefix = ''): { path: string; error: ValidationError } | null {
  for (const error of errors) {
    const path = memberPath(prefix, error.property);
    if (error.constraints && Object.keys(error.constraints).length > 0) return { path, error };
    if (error.children?.length) {
      const nested = firstFailure(error.children, path);
      if (nested) return nested;
    }
  }
  return null;
}

/**
 * The path of the first declared member that is `null` (class-validator lets `null` through
 * `@IsOptional`; a handler would then take it for a value), recursing into nested DTOs.
 */
function nullMemberPath(obj: object, prefix = ''): string | null {
  for (const [key, v] of Object.entries(obj)) {
    const path = Array.isArray(obj) ? `${prefix}[${key}]` : prefix ? `${prefix}.${key}` : key;
    if (v === null) return path;
    if (Array.isArray(v)) {
      const nested = nullMemberPath(v, path);
      if (nested) return nested;
    } else if (typeof v === 'object' && Object.getPrototypeOf(v) !== Object.prototype) {
      const nested = nullMemberPath(v as object, path);
      if (nested) return nested;
    }
  }
  return null;
}

/**
 * Validates and types a payload against a DTO class. Unknown members are dropped; an optional
 * member is either absent or of its type (`null` is refused, not taken for "absent").
 * @param cls the DTO class
 * @param payload the request payload object
 * @returns a DTO instance holding only the declared members
 * @throws ProtocolError `missing_field` (a required member is absent) or `invalid_payload`
 *   (message names the member, e.g. `access_policy.invoke must be "allow" or "deny"`; a value
 *   of the wrong type gets the type's message, e.g. `name must be a string`)
 */
export function validatePayload<T extends object>(cls: DtoClass<T>, payload: Record<string, unknown>): T {
  const instance = plainToInstance(cls, payload, { exposeDefaultValues: false });
  const errors = validateSync(instance, {
    whitelist: true,
    forbidUnknownValues: false,
    // Every constraint of a member runs, so that the type constraint can be reported (messageOf).
    stopAtFirstError: false,
    validationError: { target: false },
  });
  const failure = firstFailure(errors);
  if (!failure) {
    const nullPath = nullMemberPath(instance);
    if (nullPath) throw new ProtocolError('invalid_payload', `${nullPath} must not be null (leave it out instead)`);
  }
  if (failure) {
    const { path, error } = failure;
    if (error.value === undefined || error.value === null) {
      throw new ProtocolError('missing_field', `missing field: ${path}`);
    }
    const constraints = error.constraints ?? {};
    // an array element of a nested DTO that is not an object (`mounts: [5]`)
    if (Object.keys(constraints).length === 1 && constraints.nestedValidation !== undefined) {
      throw new ProtocolError('invalid_payload', `${path} must be an object`);
    }
    const message = messageOf(constraints) ?? `${path} is invalid`;
    // class-validator names the leaf property; make nested paths explicit.
    const named = message.startsWith(error.property) && path !== error.property ? path + message.slice(error.property.length) : message;
    throw new ProtocolError('invalid_payload', named);
  }
  return instance;
}
