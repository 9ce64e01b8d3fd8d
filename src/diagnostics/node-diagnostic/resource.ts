/**
 * The NodeDiagnostic custom resource (deploy/crds/nodediagnostic.yaml): its names, the shapes of
 * its spec and status, and the one check of a spec the agent acts on. Types and pure functions only.
 */
import { DIAGNOSTIC_CATEGORIES, type BundleManifest, type DiagnosticCategory } from '../bundle.ts';
import { parseDuration } from '../../util/duration.ts';

export const GROUP = 'vigil.dev';
export const VERSION = 'v1alpha1';
export const PLURAL = 'nodediagnostics';
export const KIND = 'NodeDiagnostic';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const COLLECTION_PATH = `/apis/${GROUP}/${VERSION}/${PLURAL}`;

export type Phase = 'Pending' | 'Collecting' | 'Uploading' | 'Succeeded' | 'Failed';
export const TERMINAL: readonly Phase[] = ['Succeeded', 'Failed'];

export interface NodeDiagnosticSpec {
  categories?: string[];
  delivery?: string;
  since?: string;
}

export interface ManifestSummary {
  categories: string[];
  collectors: number;
  failedCollectors: number;
  totalBytes: number;
  truncated: boolean;
  durationMs: number;
}

export interface NodeDiagnosticStatus {
  phase?: Phase;
  message?: string;
  observedUID?: string;
  startTime?: string;
  completionTime?: string;
  bytes?: number;
  location?: string;
  keptOnNode?: boolean;
  errors?: string[];
  manifest?: ManifestSummary;
}

export interface NodeDiagnostic {
  apiVersion?: string;
  kind?: string;
  metadata?: {
    name?: string;
    uid?: string;
    resourceVersion?: string;
    creationTimestamp?: string | Date;
    deletionTimestamp?: string | Date;
  };
  spec?: NodeDiagnosticSpec;
  status?: NodeDiagnosticStatus;
}

/** What the agent does for one resource, once its spec is checked. */
export interface CaptureRequest {
  categories: DiagnosticCategory[];
  delivery: { kind: 'node' } | { kind: 'upload'; url: string };
  since?: string;
}

/**
 * Checks a spec the way the CRD's schema does (an object written before the CRD was installed, or
 * by a client that skipped validation, must still fail clearly), naming the field at fault.
 */
export function parseSpec(spec: unknown): { ok: true; request: CaptureRequest } | { ok: false; error: string } {
  const s = (typeof spec === 'object' && spec !== null ? spec : {}) as Record<string, unknown>;
  const raw = s.categories ?? [];
  if (!Array.isArray(raw)) return { ok: false, error: 'spec.categories: expected a list' };
  const categories: DiagnosticCategory[] = [];
  for (const [i, c] of raw.entries()) {
    if (typeof c !== 'string' || !(DIAGNOSTIC_CATEGORIES as readonly string[]).includes(c)) {
      return { ok: false, error: `spec.categories[${i}]: ${JSON.stringify(c)} is not one of ${DIAGNOSTIC_CATEGORIES.join(', ')}` };
    }
    if (!categories.includes(c as DiagnosticCategory)) categories.push(c as DiagnosticCategory);
  }
  const delivery = s.delivery ?? 'node';
  if (typeof delivery !== 'string') return { ok: false, error: 'spec.delivery: expected "node" or an http(s) URL' };
  let target: CaptureRequest['delivery'];
  if (delivery === 'node') target = { kind: 'node' };
  else {
    const url = parseUploadUrl(delivery);
    if (typeof url === 'string') return { ok: false, error: `spec.delivery: ${url}` };
    target = { kind: 'upload', url: delivery };
  }
  if (s.since !== undefined && (typeof s.since !== 'string' || parseDuration(s.since) === undefined)) {
    return { ok: false, error: `spec.since: expected a duration such as 30m or 2h, not ${JSON.stringify(s.since)}` };
  }
  return {
    ok: true,
    request: {
      categories: categories.length ? categories : [...DIAGNOSTIC_CATEGORIES],
      delivery: target,
      ...(typeof s.since === 'string' ? { since: s.since } : {}),
    },
  };
}

/** A URL the uploader can PUT to, or why not. */
export function parseUploadUrl(text: string): URL | string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return `${JSON.stringify(redactUrl(text))} is not a URL (expected "node" or an http(s) URL)`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `${url.protocol} URLs are not supported (http or https)`;
  return url;
}

/**
 * A URL without what may be a credential: a presigned URL's signature lives in its query string,
 * and user:password in its authority. Used wherever a URL is logged or written to a status.
 */
export function redactUrl(text: string): string {
  try {
    const u = new URL(text);
    u.username = '';
    u.password = '';
    const hadQuery = u.search !== '';
    u.search = '';
    u.hash = '';
    return hadQuery ? `${u.toString()}?…` : u.toString();
  } catch {
    return text.replace(/[?#].*$/, '?…').replace(/\/\/[^/@]*@/, '//');
  }
}

export function summarize(m: BundleManifest): ManifestSummary {
  return {
    categories: [...m.categories],
    collectors: m.collectors.length,
    failedCollectors: m.collectors.filter((c) => c.error !== undefined || c.timedOut).length,
    totalBytes: m.totalBytes,
    truncated: m.truncated,
    durationMs: Math.max(0, Date.parse(m.endedAt) - Date.parse(m.startedAt)) || 0,
  };
}

/** The API server path that serves a bundle kept on a node (the agent's own port, through nodes/proxy). */
export function nodeProxyPath(node: string, port: number, file: string): string {
  return `/api/v1/nodes/http:${encodeURIComponent(node)}:${port}/proxy/diagnostics/${encodeURIComponent(file)}`;
}
