/**
 * Credentials of an approved join request, kept until the node fetches them
 * (`control.node_join_status`), without keeping its node secret readable at rest
 * (docs/operations.md "Encryption at rest"): the request secret, which only the node holds (the store keeps
 * its SHA-256), deterministically derives an X25519 key pair; the request keeps the public
 * key, approval seals the credentials to it (ephemeral X25519, HKDF-SHA256, AES-256-GCM), and
 * only a caller presenting the request secret can open them. The sealed box is bound to its
 * request id.
 *
 * Sealed form (base64): ephemeral public key 32 bytes | nonce 12 | tag 16 | ciphertext.
 */
import {
  createCipheriv,
  createDecipheriv,
  createPrivateKey,
  createPublicKey,
  diffieHellman,
  generateKeyPairSync,
  hkdfSync,
  KeyObject,
  randomBytes,
} from 'node:crypto';

const PKCS8_X25519 = Buffer.from('302e020100300506032b656e04220420', 'hex');
const SPKI_X25519 = Buffer.from('302a300506032b656e032100', 'hex');

function privateFromSeed(seed: Buffer): KeyObject {
  return createPrivateKey({ key: Buffer.concat([PKCS8_X25519, seed]), format: 'der', type: 'pkcs8' });
}

function publicFromRaw(raw: Buffer): KeyObject {
  return createPublicKey({ key: Buffer.concat([SPKI_X25519, raw]), format: 'der', type: 'spki' });
}

function rawPublic(key: KeyObject): Buffer {
  return (key.export({ format: 'der', type: 'spki' }) as Buffer).subarray(SPKI_X25519.length);
}

function seedOf(requestSecret: string, requestId: string): Buffer {
  return Buffer.from(hkdfSync('sha256', Buffer.from(requestSecret), Buffer.from(requestId), 'svc-join-seal/1', 32));
}

function boxKey(shared: Buffer, ephemeral: Buffer, recipient: Buffer, requestId: string): Buffer {
  return Buffer.from(hkdfSync('sha256', shared, Buffer.concat([ephemeral, recipient]), `svc-join-box/1\0${requestId}`, 32));
}

/** The public key (base64) that credentials for this request are sealed to. */
export function sealPublicKey(requestSecret: string, requestId: string): string {
  return rawPublic(createPublicKey(privateFromSeed(seedOf(requestSecret, requestId)))).toString('base64');
}

/** Seals `plaintext` (JSON of the credentials) to a request's public key. @returns base64 */
export function sealCredentials(plaintext: string, publicKeyB64: string, requestId: string): string {
  const recipient = Buffer.from(publicKeyB64, 'base64');
  const eph = generateKeyPairSync('x25519');
  const ephRaw = rawPublic(eph.publicKey);
  const shared = diffieHellman({ privateKey: eph.privateKey, publicKey: publicFromRaw(recipient) });
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', boxKey(shared, ephRaw, recipient, requestId), iv);
  const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return Buffer.concat([ephRaw, iv, cipher.getAuthTag(), ct]).toString('base64');
}

/** Opens a sealed box with the request secret. @returns the plaintext, or null when it does not open */
export function openCredentials(sealed: string, requestSecret: string, requestId: string): string | null {
  try {
    const raw = Buffer.from(sealed, 'base64');
    const priv = privateFromSeed(seedOf(requestSecret, requestId));
    const recipient = rawPublic(createPublicKey(priv));
    const ephRaw = raw.subarray(0, 32);
    const shared = diffieHellman({ privateKey: priv, publicKey: publicFromRaw(ephRaw) });
    const decipher = createDecipheriv('aes-256-gcm', boxKey(shared, ephRaw, recipient, requestId), raw.subarray(32, 44));
    decipher.setAuthTag(raw.subarray(44, 60));
    return Buffer.concat([decipher.update(raw.subarray(60)), decipher.final()]).toString('utf8');
  } catch {
    return null;
  }
}
