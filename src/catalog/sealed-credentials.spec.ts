import { openCredentials, sealCredentials, sealPublicKey } from './sealed-credentials';

describe('sealed join credentials', () => {
  it('open only with the request secret and request id they were sealed for', () => {
    const pub = sealPublicKey('request-secret', 'join-1');
    const box = sealCredentials('{"node_secret":"s3cret"}', pub, 'join-1');
    expect(Buffer.from(box, 'base64').toString('latin1')).not.toContain('s3cret');
    expect(openCredentials(box, 'request-secret', 'join-1')).toBe('{"node_secret":"s3cret"}');
    expect(openCredentials(box, 'other-secret', 'join-1')).toBeNull();
    expect(openCredentials(box, 'request-secret', 'join-2')).toBeNull();
    expect(openCredentials('garbage', 'request-secret', 'join-1')).toBeNull();
    // a fresh ephemeral key per seal
    expect(sealCredentials('x', pub, 'join-1')).not.toBe(sealCredentials('x', pub, 'join-1'));
  });
});
