import {
  BINARY_HEADER_ROOM,
  completeBinaryFrame,
  encodeBinaryFrame,
  EnvelopeError,
  legacyReplacement,
  nestsDeeperThan,
  parseBinaryFrame,
  parseFrame,
  replyTypeOf,
} from './envelope';

function rejects(text: string): EnvelopeError {
  try {
    parseFrame(text);
  } catch (e) {
    expect(e).toBeInstanceOf(EnvelopeError);
    return e as EnvelopeError;
  }
  throw new Error(`accepted: ${text}`);
}

describe('parseFrame', () => {
  it('accepts a control request and defaults payload to {}', () => {
    const f = parseFrame('{"channel":"control","type":"control.ping","id":7}');
    expect(f).toMatchObject({ channel: 'control', type: 'control.ping', id: 7, tag: null, payload: {} });
  });

  it('accepts an acheron request with root fields and a tag', () => {
    const f = parseFrame('{"channel":"acheron","type":"acheron.t_walk","tag":4294967295,"fid":1,"path":["a"]}');
    expect(f.tag).toBe(4294967295);
    expect(f.root.path).toEqual(['a']);
  });

  it.each([
    ['not json', 'nope', 'invalid_envelope', 'control'],
    ['array', '[]', 'invalid_envelope', 'control'],
    ['no channel', '{"type":"control.ping"}', 'invalid_envelope', 'control'],
    ['bad channel', '{"channel":"x","type":"control.ping"}', 'invalid_envelope', 'control'],
    ['namespace', '{"channel":"control","type":"acheron.t_walk"}', 'invalid_envelope', 'control'],
    ['namespace on acheron', '{"channel":"acheron","type":"control.ping","tag":1}', 'invalid_envelope', 'acheron'],
    ['legacy fs_t', '{"channel":"acheron","type":"acheron.fs_t_open","tag":1}', 'legacy_type_rejected', 'acheron'],
    ['legacy without tag still named', '{"channel":"acheron","type":"acheron.fs_error"}', 'legacy_type_rejected', 'acheron'],
    ['unprefixed', '{"channel":"control","type":"ping"}', 'legacy_type_rejected', 'control'],
    ['tag missing', '{"channel":"acheron","type":"acheron.t_stat"}', 'invalid_envelope', 'acheron'],
    ['tag negative', '{"channel":"acheron","type":"acheron.t_stat","tag":-1}', 'invalid_envelope', 'acheron'],
    ['tag too large', '{"channel":"acheron","type":"acheron.t_stat","tag":4294967296}', 'invalid_envelope', 'acheron'],
    ['payload array', '{"channel":"control","type":"control.ping","payload":[]}', 'invalid_envelope', 'control'],
    ['type with spaces', '{"channel":"control","type":"control. ping"}', 'invalid_envelope', 'control'],
  ])('rejects %s', (_n, text, code, channel) => {
    const e = rejects(text);
    expect(e.code).toBe(code);
    expect(e.channel).toBe(channel);
  });

  it('keeps the id of a rejected control frame and the tag of a rejected acheron frame', () => {
    expect(rejects('{"channel":"control","type":"ping","id":"abc"}').id).toBe('abc');
    expect(rejects('{"channel":"acheron","type":"acheron.fs_r_x","tag":9}').tag).toBe(9);
  });

  it('rejects nesting deeper than 64 levels without recursion', () => {
    const deep = '{"channel":"control","type":"control.ping","id":1,"payload":{"a":' + '['.repeat(100_000) + ']'.repeat(100_000) + '}}';
    const e = rejects(deep);
    expect(e.message).toContain('deeper than 64');
    expect(e.id).toBe(1);
    expect(nestsDeeperThan({ a: { b: {} } }, 3)).toBe(false);
    expect(nestsDeeperThan({ a: { b: { c: {} } } }, 3)).toBe(true);
  });
});

describe('prototype keys (one rule for every request)', () => {
  it.each(['__proto__', 'constructor', 'prototype'])('refuses %s at any depth of the payload, naming its path', (key) => {
    const top = rejects(`{"channel":"control","type":"control.ping","id":3,"payload":{"${key}":{"x":1}}}`);
    expect([top.code, top.channel, top.id, top.message]).toEqual(['invalid_payload', 'control', 3, `${key}: this key is not accepted in a payload`]);
    const nested = rejects(
      `{"channel":"control","type":"control.node_service_upsert","id":4,"payload":{"node_id":"n","platform":{"os":"linux","${key}":{"prototype":{"x":1}}}}}`,
    );
    expect([nested.code, nested.message]).toEqual(['invalid_payload', `platform.${key}: this key is not accepted in a payload`]);
    const inArray = rejects(
      `{"channel":"control","type":"control.node_service_upsert","id":5,"payload":{"services":[{"service_id":"s"},{"ops":{"${key}":1}}]}}`,
    );
    expect(inArray.message).toBe(`services[1].ops.${key}: this key is not accepted in a payload`);
  });

  it.each(['__proto__', 'constructor', 'prototype'])('refuses %s among the root fields of acheron requests and on unknown types', (key) => {
    const root = rejects(`{"channel":"acheron","type":"acheron.t_fs_getattr","tag":8,"node":1,"${key}":1}`);
    expect([root.code, root.channel, root.tag]).toEqual(['invalid_payload', 'acheron', 8]);
    expect(root.message).toContain(`${key}: this key is not accepted`);
    const inPath = rejects(`{"channel":"acheron","type":"acheron.t_walk","tag":9,"fid":0,"newfid":1,"path":["a",{"${key}":1}]}`);
    expect(inPath.message).toContain(`path[1].${key}`);
    expect(rejects(`{"channel":"control","type":"control.nope","id":1,"payload":{"x":{"${key}":1}}}`).code).toBe('invalid_payload');
  });

  it('accepts the words as values and inside longer keys', () => {
    const f = parseFrame(
      '{"channel":"control","type":"control.project_create","id":1,"payload":{"name":"constructor","x":["__proto__"],"my_prototype":{"constructors":1}}}',
    );
    expect(f.payload.name).toBe('constructor');
  });
});

describe('legacyReplacement', () => {
  it('names the unified v2 replacement', () => {
    expect(legacyReplacement('acheron.fs_t_read', 'acheron')).toBe('acheron.t_fs_read');
    expect(legacyReplacement('acheron.fs_r_read', 'acheron')).toBe('acheron.r_fs_read');
    expect(legacyReplacement('acheron.fs_evt_inval', 'acheron')).toBe('acheron.e_fs_inval');
    expect(legacyReplacement('acheron.fs_error', 'acheron')).toBe('acheron.err_fs');
    expect(legacyReplacement('ping', 'control')).toBe('control.ping');
    expect(legacyReplacement('control.ping', 'control')).toBeNull();
  });
});

describe('binary frames', () => {
  it('round-trips header and bytes', () => {
    const data = Buffer.from([0, 1, 2, 255]);
    const f = parseBinaryFrame(encodeBinaryFrame({ channel: 'acheron', type: 'acheron.t_fs_write', tag: 3, h: 1 }, data));
    expect(f.type).toBe('acheron.t_fs_write');
    expect(Buffer.compare(f.data!, data)).toBe(0);
  });
  it('rejects a header length beyond the frame', () => {
    const b = Buffer.alloc(8);
    b.writeUInt32BE(100, 0);
    expect(() => parseBinaryFrame(b)).toThrow(EnvelopeError);
  });
});

describe('replyTypeOf', () => {
  it('maps request types to reply types', () => {
    expect(replyTypeOf('control.version')).toBe('control.version_ack');
    expect(replyTypeOf('control.connect')).toBe('control.connect_ack');
    expect(replyTypeOf('control.ping')).toBe('control.pong');
    expect(replyTypeOf('control.node_list')).toBe('control.node_list');
    expect(replyTypeOf('acheron.t_fs_read')).toBe('acheron.r_fs_read');
  });
});

describe('completeBinaryFrame', () => {
  const header = { channel: 'acheron', type: 'acheron.t_fs_write', tag: 9, h: 4, payload: { off: 10, n: 5 } };

  it('completes the frame around data already in place, without copying it', () => {
    const buf = Buffer.alloc(BINARY_HEADER_ROOM + 8);
    buf.write('hello', BINARY_HEADER_ROOM);
    const frame = completeBinaryFrame(buf, BINARY_HEADER_ROOM, 5, JSON.stringify(header));
    expect(frame.buffer).toBe(buf.buffer);
    expect(Buffer.compare(frame, encodeBinaryFrame(header, Buffer.from('hello')))).toBe(0);
    const f = parseBinaryFrame(frame);
    expect(f.root.h).toBe(4);
    expect(f.data!.toString()).toBe('hello');
  });

  it('copies into a new frame when the header does not fit in the room', () => {
    const buf = Buffer.alloc(16 + 3);
    buf.write('abc', 16);
    const frame = completeBinaryFrame(buf, 16, 3, JSON.stringify(header));
    expect(frame.buffer).not.toBe(buf.buffer);
    expect(parseBinaryFrame(frame).data!.toString()).toBe('abc');
  });
});
