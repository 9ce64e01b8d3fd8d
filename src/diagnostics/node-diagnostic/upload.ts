/**
 * Streams a bundle to a URL with HTTP PUT (a presigned S3 URL takes exactly this: a PUT with a
 * Content-Length, no chunked encoding). Retries what may pass (no answer, 5xx, 408, 429) with
 * backoff; a refusal (403: an expired signature) fails at once. The deadline grows with the size,
 * and a connection that makes no progress for `idleMs` is cut.
 */
import { createReadStream, statSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { pipeline } from 'node:stream/promises';
import { Backoff } from '../../sinks/kubernetes/backoff.ts';
import { errorMessage } from '../../util/errors.ts';
import { redactUrl } from './resource.ts';

export interface UploadOptions {
  attempts?: number;
  backoff?: { baseMs: number; maxMs: number };
  /** No bytes moving for this long cuts the attempt (default 60 s). */
  idleMs?: number;
  /** Each attempt's deadline: this much plus the time the bundle takes at `minBytesPerSecond` (defaults: 2 min, 256 KiB/s). */
  baseTimeoutMs?: number;
  minBytesPerSecond?: number;
  signal?: AbortSignal;
  onRetry?: (attempt: number, error: string, delayMs: number) => void;
}

export interface UploadResult {
  ok: boolean;
  attempts: number;
  status?: number;
  /** Why each failed attempt failed (URL redacted). */
  errors: string[];
}

class Permanent extends Error {}

export async function uploadFile(file: string, url: string, o: UploadOptions = {}): Promise<UploadResult> {
  const attempts = o.attempts ?? 5;
  const backoff = new Backoff(o.backoff?.baseMs ?? 1000, o.backoff?.maxMs ?? 30_000);
  const bytes = statSync(file).size;
  const deadlineMs = (o.baseTimeoutMs ?? 120_000) + Math.ceil((bytes / (o.minBytesPerSecond ?? 256 * 1024)) * 1000);
  const errors: string[] = [];
  let status: number | undefined;
  for (let i = 1; i <= attempts; i++) {
    if (o.signal?.aborted) break;
    try {
      status = await putOnce(file, bytes, new URL(url), deadlineMs, o.idleMs ?? 60_000, o.signal);
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

class RetryAfter extends Error {
  constructor(
    message: string,
    readonly ms: number | undefined,
  ) {
    super(message);
  }
}

function putOnce(file: string, bytes: number, url: URL, deadlineMs: number, idleMs: number, outer?: AbortSignal): Promise<number> {
  const signal = AbortSignal.any([AbortSignal.timeout(deadlineMs), ...(outer ? [outer] : [])]);
  const mod = url.protocol === 'https:' ? https : http;
  return new Promise<number>((resolve, reject) => {
    const req = mod.request(url, {
      method: 'PUT',
      signal,
      headers: { 'content-type': 'application/gzip', 'content-length': String(bytes) },
    });
    req.setTimeout(idleMs, () => req.destroy(new Error(`no progress for ${idleMs} ms`)));
    req.once('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        if (body.length < 512) body += d;
      });
      res.once('error', reject);
      res.once('end', () => {
        const code = res.statusCode ?? 0;
        if (code >= 200 && code < 300) return resolve(code);
        const text = `${redactUrl(url.toString())} answered ${code}${body.trim() ? `: ${body.trim().slice(0, 200)}` : ''}`;
        if (code === 408 || code === 429 || code >= 500) {
          const ra = Number(res.headers['retry-after']);
          return reject(new RetryAfter(text, Number.isFinite(ra) && ra > 0 ? Math.min(ra * 1000, 60_000) : undefined));
        }
        reject(new Permanent(text));
      });
    });
    req.once('error', (err) => {
      const why = signal.aborted && !outer?.aborted ? `timed out after ${deadlineMs} ms` : errorMessage(err);
      // An error names the host, never the query string.
      reject(new Error(`PUT ${redactUrl(url.toString())}: ${why}`));
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
