/**
 * Shared by the NodeDiagnostic and `vigil logs` tests: the CRD on a real API server, a local HTTP
 * server that takes PUT uploads (what a presigned S3 URL does), the node proxy set up for a
 * kubelet-less Node, and reading bundles back with the system's tar.
 */
import { spawnSync } from 'node:child_process';
import { createWriteStream, mkdirSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { waitFor, type TestCluster } from './cluster.ts';
import { newToken, sealDestination, tokenSHA256 } from '../../src/diagnostics/index.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CRD_YAML = path.join(ROOT, 'deploy/crds/nodediagnostic.yaml');
export const RBAC_LOGS_YAML = path.join(ROOT, 'deploy/rbac-logs.yaml');
const CRD_NAME = 'nodediagnostics.vigil.dev';

/** Applies deploy/crds/nodediagnostic.yaml and waits until the API server serves the kind. */
export async function installCrd(cluster: TestCluster): Promise<void> {
  await cluster.apply(CRD_YAML);
  const ext = cluster.admin.kc.makeApiClient(k8s.ApiextensionsV1Api);
  await waitFor('the NodeDiagnostic CRD Established', async () => {
    const crd = await ext.readCustomResourceDefinition({ name: CRD_NAME });
    return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True');
  });
  const custom = cluster.admin.kc.makeApiClient(k8s.CustomObjectsApi);
  await waitFor('nodediagnostics served', async () => {
    await custom.listClusterCustomObject({ group: 'vigil.dev', version: 'v1alpha1', plural: 'nodediagnostics' });
    return true;
  });
}

export interface NodeDiagnosticObject {
  metadata?: { name?: string; uid?: string };
  spec?: Record<string, unknown>;
  status?: {
    phase?: string;
    message?: string;
    bytes?: number;
    location?: string;
    keptOnNode?: boolean;
    errors?: string[];
    observedUID?: string;
    destinationKey?: string;
    startTime?: string;
    completionTime?: string;
    manifest?: { categories?: string[]; collectors?: number; failedCollectors?: number; totalBytes?: number };
  };
}

export function nodeDiagnostics(kubeconfig: string) {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const api = kc.makeApiClient(k8s.CustomObjectsApi);
  const base = { group: 'vigil.dev', version: 'v1alpha1', plural: 'nodediagnostics' };
  return {
    create: (name: string, spec: Record<string, unknown>) =>
      api.createClusterCustomObject({
        ...base,
        body: { apiVersion: 'vigil.dev/v1alpha1', kind: 'NodeDiagnostic', metadata: { name }, spec },
      }) as Promise<NodeDiagnosticObject>,
    get: (name: string) => api.getClusterCustomObject({ ...base, name }) as Promise<NodeDiagnosticObject>,
    list: async () => ((await api.listClusterCustomObject(base)) as { items: NodeDiagnosticObject[] }).items,
    delete: (name: string) => api.deleteClusterCustomObject({ ...base, name }),
    patchSpec: (name: string, spec: Record<string, unknown>) =>
      api.patchClusterCustomObject({ ...base, name, body: { spec } }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch)),
    patchStatus: (name: string, status: Record<string, unknown>) =>
      api.patchClusterCustomObjectStatus(
        { ...base, name, body: { status } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      ),
  };
}

/** What `vigil logs` does for one node: a NodeDiagnostic with its token's hash; the token is returned. */
export async function requestKept(
  kubeconfig: string,
  node: string,
  spec: Record<string, unknown> = {},
): Promise<{ token: string; created: NodeDiagnosticObject }> {
  const token = newToken();
  const created = await nodeDiagnostics(kubeconfig).create(node, { delivery: 'node', ...spec, tokenSHA256: tokenSHA256(token) });
  return { token, created };
}

/** An upload request as `vigil logs --upload-url` makes it: the URL sealed to the key the agent publishes. */
export async function requestUpload(
  kubeconfig: string,
  node: string,
  url: string,
  spec: Record<string, unknown> = {},
): Promise<{ token: string; created: NodeDiagnosticObject }> {
  const nd = nodeDiagnostics(kubeconfig);
  const r = await requestKept(kubeconfig, node, { ...spec, delivery: 'upload' });
  const uid = r.created.metadata!.uid!;
  const key = await waitFor(
    `${node}: the agent's destinationKey`,
    async () => {
      const o = await nd.get(node);
      return o.status?.observedUID === uid && o.status.destinationKey;
    },
    60_000,
    100,
  );
  await nd.patchSpec(node, { sealedDestination: sealDestination(key, uid, url) });
  return r;
}

export interface PutServer {
  /** http://127.0.0.1:PORT */
  url: string;
  /** Every PUT received: path (with query) to the file written and its size. */
  received: Map<string, { file: string; bytes: number; contentLength: number }>;
  close(): Promise<void>;
}

/** An HTTP server that stores each PUT body under `dir` (named after the request path), like a presigned-URL bucket. */
export async function startPutServer(dir: string): Promise<PutServer> {
  mkdirSync(dir, { recursive: true });
  const received = new Map<string, { file: string; bytes: number; contentLength: number }>();
  const server = http.createServer((req, res) => {
    if (req.method !== 'PUT') {
      res.writeHead(405).end();
      return;
    }
    const url = new URL(req.url ?? '/', 'http://x');
    const file = path.join(dir, path.basename(url.pathname) || 'upload');
    let bytes = 0;
    req.on('data', (d: Buffer) => (bytes += d.length));
    pipeline(req, createWriteStream(file)).then(
      () => {
        received.set(req.url ?? '/', { file, bytes, contentLength: Number(req.headers['content-length']) });
        res.writeHead(200).end();
      },
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * This machine's first IPv4 address that is not loopback. The API server's node proxy refuses
 * loopback and link-local targets (isProxyableHostname: only global unicast), so a Node that
 * stands for this machine must carry such an address.
 */
export function proxyableAddress(): string {
  for (const list of Object.values(os.networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal && !a.address.startsWith('169.254.')) return a.address;
  }
  throw new Error(
    'no non-loopback IPv4 address on this machine: the node proxy (nodes/proxy) cannot reach the agent (it refuses loopback targets)',
  );
}

/**
 * Plays kubelet for the node proxy: the Node's InternalIP is this machine, so the API server's
 * GET /api/v1/nodes/http:NODE:PORT/proxy/... reaches the agent listening on PORT. The kubelet
 * port (daemonEndpoints) stays another port: only then does the API server use plain HTTP to
 * the requested port instead of its kubelet client (HTTPS to the kubelet port).
 */
export async function pointNodeAtThisMachine(cluster: TestCluster, node: string): Promise<string> {
  const address = proxyableAddress();
  await cluster.admin.core.patchNodeStatus(
    {
      name: node,
      body: { status: { addresses: [{ type: 'InternalIP', address }], daemonEndpoints: { kubeletEndpoint: { Port: 10250 } } } },
    },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
  );
  return address;
}

/** GET an API server path into a file with a kubeconfig's credentials (and extra headers); returns the HTTP status. */
export async function apiGetToFile(
  kubeconfig: string,
  apiPath: string,
  file: string,
  headers: Record<string, string> = {},
): Promise<number> {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const server = new URL(kc.getCurrentCluster()!.server);
  const opts: https.RequestOptions = {
    method: 'GET',
    hostname: server.hostname,
    port: server.port,
    path: apiPath,
    headers: { ...headers },
  };
  await kc.applyToHTTPSOptions(opts);
  return new Promise<number>((resolve, reject) => {
    const req = https.request(opts, (res) => {
      pipeline(res, createWriteStream(file)).then(() => resolve(res.statusCode ?? 0), reject);
    });
    req.once('error', reject);
    req.end();
  });
}

/** Names in a .tar.gz (the system's tar: an independent reader of what Vigil wrote). */
export function tarList(file: string): string[] {
  const r = spawnSync('tar', ['-tzf', file], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tar -tzf ${file}: ${r.stderr}`);
  return r.stdout.split('\n').filter(Boolean);
}

export function tarRead(file: string, member: string): string {
  const r = spawnSync('tar', ['-xzOf', file, member], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`tar -xzOf ${file} ${member}: ${r.stderr}`);
  return r.stdout;
}

export interface BundleManifestLike {
  version: number;
  node?: string;
  categories: string[];
  collectors: { name: string; category: string; file?: string; durationMs?: number; error?: string; timedOut?: boolean }[];
  /** Collectors that ended with an error (timeouts included). */
  errors?: number;
  limits?: { collectorTimeoutMs: number };
}

/** The bundle's manifest.json (at the top, or in the bundle's one top folder). */
export function bundleManifest(file: string): { manifest: BundleManifestLike; entries: string[] } {
  const entries = tarList(file);
  const member = entries.find((e) => /(^|\/)manifest\.json$/.test(e) && e.split('/').filter(Boolean).length <= 2);
  if (!member) throw new Error(`no manifest.json in ${file}: ${entries.slice(0, 20).join(', ')}`);
  return { manifest: JSON.parse(tarRead(file, member)) as BundleManifestLike, entries };
}
