/**
 * Streams a bundle to a URL with HTTP PUT (a presigned S3 URL takes exactly this: a PUT with a
 * Content-Length, no chunked encoding). The destination is checked and resolved once first
 * (destination.ts); every attempt connects to the checked addresses. Retries what may pass (no
 * answer, 5xx, 408, 429) with backoff; a refusal (403: an expired signature) fails at once. The
 * deadline grows with the size, and a connection that makes no progress for `idleMs` is cut.
 * Errors name neither the URL nor anything the destination answered (its body is never read):
 * they end up in a status every agent can read.
 */
import { createReadStream, statSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { pipeline } from 'node:stream/promises';
import { Backoff } from '../../util/backoff.ts';
import { errorMessage, VigilError } from '../../util/errors.ts';
import { checkDestination, DestinationRefused, type DestinationPolicy, type Resolver } from './destination.ts';

export interface UploadOptions {
  attempts?: number;
  backoff?: { baseMs: number; maxMs: number };
  /** No bytes moving for this long cuts the attempt (default 60 s). */
  idleMs?: number;
  /** Each attempt's deadline: this much plus the time the bundle takes at `minBytesPerSecond` (defaults: 2 min, 256 KiB/s). */
  baseTimeoutMs?: number;
  minBytesPerSecond?: number;
  signal?: AbortSignal;
  /** Which destinations are allowed (default: https to public addresses only). */
  policy?: DestinationPolicy;
  /** Tests: the DNS resolver, a connection factory that sends nothing, extra trusted CAs. */
  resolve?: Resolver;
  createConnection?: http.RequestOptions['createConnection'];
  ca?: string | Buffer;
  onRetry?: (attempt: number, error: string, delayMs: number) => void;
}

export interface UploadResult {
  ok: boolean;
  attempts: number;
  status?: number;
  /** Why each failed attempt failed (no URL, no response body). */
  errors: string[];
  /** Set when the destination was refused by policy: no connection was made. */
  refused?: string;
}

/** An HTTP answer retrying cannot change. */
class Permanent extends VigilError {
  constructor(message: string) {
    super('VIGIL_E_UPLOAD_REJECTED', message);
  }
}

export async function uploadFile(file: string, url: string, o: UploadOptions = {}): Promise<UploadResult> {
  const attempts = o.attempts ?? 5;
  const backoff = new Backoff(o.backoff?.baseMs ?? 1000, o.backoff?.maxMs ?? 30_000);
  const bytes = statSync(file).size;
  const deadlineMs = (o.baseTimeoutMs ?? 120_000) + Math.ceil((bytes / (o.minBytesPerSecond ?? 256 * 1024)) * 1000);
  const errors: string[] = [];
  let status: number | undefined;
  let dest;
  try {
    dest = await checkDestination(url, o.policy ?? { allowedHosts: [], allowHttp: false }, o.resolve);
  } catch (err) {
    if (!(err instanceof DestinationRefused)) throw err;
    return { ok: false, attempts: 0, errors: [`refused: ${err.message}`], refused: err.message };
  }
  const target: Target = { url: dest.url, lookup: dest.lookup, createConnection: o.createConnection, ca: o.ca };
  for (let i = 1; i <= attempts; i++) {
    if (o.signal?.aborted) break;
    try {
      status = await putOnce(file, bytes, target, deadlineMs, o.idleMs ?? 60_000, o.signal);
      return { ok: true, attempts: i, status, errors };
    } catch (err) {
      const msg = `attempt ${i}: ${errorMessage(err)}`;
      errors.push(msg);
      if (err instanceof Permanent || i === attempts || o.signal?.aborted) return { ok: false, attempts: i, errors };
      const retryAfter = err instanceof RetryAfter ? err.ms : undefined;
      const delay = retryAfter ?? backoff.next();
      o.onRetry?.(i, msg, delay);
      await sleep(delay, o.signal);
    }
  }
  return { ok: false, attempts, errors };
}

class RetryAfter extends VigilError {
  constructor(
    message: string,
    readonly ms: number | undefined,
  ) {
    super('VIGIL_E_UPLOAD_RETRYABLE', message);
  }
}

interface Target {
  url: URL;
  lookup: NonNullable<http.RequestOptions['lookup']>;
  createConnection: http.RequestOptions['createConnection'] | undefined;
  ca: string | Buffer | undefined;
}

function putOnce(file: string, bytes: number, t: Target, deadlineMs: number, idleMs: number, outer?: AbortSignal): Promise<number> {
  const signal = AbortSignal.any([AbortSignal.timeout(deadlineMs), ...(outer ? [outer] : [])]);
  const mod = t.url.protocol === 'https:' ? https : http;
  return new Promise<number>((resolve, reject) => {
    const req = mod.request(t.url, {
      method: 'PUT',
      signal,
      headers: { 'content-type': 'application/gzip', 'content-length': String(bytes) },
      // Only the checked addresses: no second DNS answer can send this elsewhere.
      lookup: t.lookup,
      // No pooled socket: each attempt connects to the addresses checked for it. (An injected
      // connector is only used without an agent.)
      ...(t.createConnection ? { createConnection: t.createConnection } : { agent: false }),
      ...(t.ca ? { ca: t.ca } : {}),
    });
    req.setTimeout(idleMs, () => req.destroy(new Error(`no progress for ${idleMs} ms`)));
    req.once('response', (res) => {
      // The body is not read: what a destination answers must never reach a status.
      res.resume();
      res.once('error', reject);
      res.once('end', () => {
        const code = res.statusCode ?? 0;
        if (code >= 200 && code < 300) return resolve(code);
        const text = `HTTP ${code} from the upload destination`;
        if (code === 408 || code === 429 || code >= 500) {
          const ra = Number(res.headers['retry-after']);
          return reject(new RetryAfter(text, Number.isFinite(ra) && ra > 0 ? Math.min(ra * 1000, 60_000) : undefined));
        }
        reject(new Permanent(text));
      });
    });
    req.once('error', (err) => {
      // An errno code only: the system's message names the address.
      const code = (err as { code?: unknown }).code;
      const why = signal.aborted
        ? outer?.aborted
          ? 'aborted'
          : `timed out after ${deadlineMs} ms`
        : typeof code === 'string' && /^E[A-Z_]+$/.test(code)
          ? code
          : /^no progress for \d+ ms$/.test(err.message)
            ? err.message
            : 'connection failed';
      reject(new Error(`PUT to the upload destination: ${why}`));
    });
    pipeline(createReadStream(file), req).catch(() => {
      /* the request's own error (above) says why */
    });
  });
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
