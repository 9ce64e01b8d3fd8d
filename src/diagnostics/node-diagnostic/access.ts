/**
 * What keeps a NodeDiagnostic free of secrets (issue #22, points 2 and 3). Every agent can read
 * every NodeDiagnostic (RBAC cannot scope a list by name), so the object carries only:
 * - `spec.tokenSHA256`: the hash of a random token only `vigil logs` holds. The agent serves the
 *   bundle a request produced only to a caller presenting that token (X-Vigil-Token; the API
 *   server's node proxy forwards it, and strips Authorization).
 * - `spec.sealedDestination`: the upload URL encrypted to a key pair the node's agent made for that
 *   one request (X25519, HKDF-SHA256, AES-256-GCM bound to the object's uid). The agent publishes
 *   the public half in `status.destinationKey`, which only that node's agent may write (the
 *   admission policy), so another node's agent can neither read the URL nor swap the key.
 */
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createPublicKey,
  diffieHellman,
  generateKeyPairSync,
  hkdfSync,
  randomBytes,
  timingSafeEqual,
  type KeyObject,
} from 'node:crypto';

/** The header that carries the token through the node proxy. */
export const TOKEN_HEADER = 'x-vigil-token';
const INFO = 'vigil.dev NodeDiagnostic destination v1';

/** 32 random bytes, base64url: what `vigil logs` keeps and sends. */
export function newToken(): string {
  return randomBytes(32).toString('base64url');
}

/** The hex SHA-256 the spec carries. */
export function tokenSHA256(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** Whether `token` hashes to `sha256Hex`, in constant time. */
export function tokenMatches(token: string, sha256Hex: string): boolean {
  const want = Buffer.from(sha256Hex, 'hex');
  const got = createHash('sha256').update(token).digest();
  return want.length === got.length && timingSafeEqual(want, got);
}

export interface DestinationKey {
  privateKey: KeyObject;
  /** base64url of the raw 32-byte X25519 public key (status.destinationKey). */
  publicKey: string;
}

export function newDestinationKey(): DestinationKey {
  const { privateKey, publicKey } = generateKeyPairSync('x25519');
  return { privateKey, publicKey: (publicKey.export({ format: 'jwk' }) as { x: string }).x };
}

function keyFor(shared: Buffer, uid: string): Buffer {
  return Buffer.from(hkdfSync('sha256', shared, Buffer.from(uid), INFO, 32));
}

/** Encrypts `url` to the agent's published key for the NodeDiagnostic `uid` (run by `vigil logs`). */
export function sealDestination(destinationKey: string, uid: string, url: string): string {
  const agent = createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: destinationKey }, format: 'jwk' });
  const eph = generateKeyPairSync('x25519');
  const key = keyFor(diffieHellman({ privateKey: eph.privateKey, publicKey: agent }), uid);
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key, iv);
  c.setAAD(Buffer.from(uid));
  const body = Buffer.concat([c.update(url, 'utf8'), c.final()]);
  const ephRaw = Buffer.from((eph.publicKey.export({ format: 'jwk' }) as { x: string }).x, 'base64url');
  return Buffer.concat([ephRaw, iv, c.getAuthTag(), body]).toString('base64url');
}

/** The URL sealed to `key` for `uid`, or undefined when it was not (tampered, another key or uid). */
export function openDestination(key: DestinationKey, uid: string, sealed: string): string | undefined {
  try {
    const raw = Buffer.from(sealed, 'base64url');
    if (raw.length < 32 + 12 + 16 + 1) return undefined;
    const eph = createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: raw.subarray(0, 32).toString('base64url') }, format: 'jwk' });
    const k = keyFor(diffieHellman({ privateKey: key.privateKey, publicKey: eph }), uid);
    const d = createDecipheriv('aes-256-gcm', k, raw.subarray(32, 44));
    d.setAAD(Buffer.from(uid));
    d.setAuthTag(raw.subarray(44, 60));
    return Buffer.concat([d.update(raw.subarray(60)), d.final()]).toString('utf8');
  } catch {
    return undefined;
  }
}
