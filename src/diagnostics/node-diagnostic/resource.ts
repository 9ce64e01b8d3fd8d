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
  /** `node` (kept on the node, fetched with the token) or `upload` (to a sealed destination). */
  delivery?: string;
  since?: string;
  /** Hex SHA-256 of the token `vigil logs` holds (access.ts). */
  tokenSHA256?: string;
  /** The upload URL sealed to status.destinationKey (access.ts). */
  sealedDestination?: string;
  /** Grant the token an existing kept bundle (an automatic capture's) instead of capturing. */
  bundle?: string;
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
  /** The agent's public key for this request's sealed upload destination. */
  destinationKey?: string;
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
  /** An upload's url is known once unsealed (requests) or from the configuration (automatic). */
  delivery: { kind: 'node' } | { kind: 'upload'; url: string };
  since?: string;
  /** Requests only: the hash of the token that may fetch the bundle. */
  tokenSHA256?: string;
  /** Requests only: grant this kept bundle rather than capture. */
  bundle?: string;
}

const BUNDLE_NAME = /^[a-z0-9][a-z0-9.-]{0,252}-\d{8}t\d{6}z-[0-9a-f]{16}\.tar\.gz$/;

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
  if (delivery !== 'node' && delivery !== 'upload') {
    return {
      ok: false,
      error:
        typeof delivery === 'string' && /^[a-z][a-z0-9+.-]*:/i.test(delivery)
          ? "spec.delivery: a URL is no longer accepted here (every agent can read this object); use `vigil logs --upload-url`, which seals it to the node's agent"
          : 'spec.delivery: expected "node" or "upload"',
    };
  }
  if (typeof s.tokenSHA256 !== 'string' || !/^[0-9a-f]{64}$/.test(s.tokenSHA256)) {
    return { ok: false, error: "spec.tokenSHA256: required, the hex SHA-256 of the caller's token (`vigil logs` sets it)" };
  }
  if (s.bundle !== undefined && (typeof s.bundle !== 'string' || !BUNDLE_NAME.test(s.bundle))) {
    return { ok: false, error: 'spec.bundle: expected the name of a bundle kept on the node (<node>-<time>-<16 hex>.tar.gz)' };
  }
  if (s.bundle !== undefined && delivery !== 'node') return { ok: false, error: 'spec.bundle: only with delivery "node"' };
  const target: CaptureRequest['delivery'] = delivery === 'node' ? { kind: 'node' } : { kind: 'upload', url: '' };
  if (s.since !== undefined && (typeof s.since !== 'string' || parseDuration(s.since) === undefined)) {
    return { ok: false, error: `spec.since: expected a duration such as 30m or 2h, not ${JSON.stringify(s.since)}` };
  }
  return {
    ok: true,
    request: {
      categories: categories.length ? categories : [...DIAGNOSTIC_CATEGORIES],
      delivery: target,
      ...(typeof s.since === 'string' ? { since: s.since } : {}),
      tokenSHA256: s.tokenSHA256,
      ...(typeof s.bundle === 'string' ? { bundle: s.bundle } : {}),
    },
  };
}

/** A URL the uploader can PUT to, or why not. */
export function parseUploadUrl(text: string): URL | string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return `${JSON.stringify(redactUrl(text))} is not a URL (expected an http(s) URL)`;
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
