/**
 * `vigil logs NODE...` (also `kubectl vigil logs`): on an operator's machine, asks the agents for
 * diagnostic bundles through the API server. Creates one NodeDiagnostic per node, shows one line
 * per node (phase, bytes, elapsed) until each is done, downloads the bundles kept on the nodes
 * through the node proxy (nodes/proxy) or reports where they were uploaded, and deletes the
 * resources. Needs the rights in deploy/rbac-logs.yaml. Exit 0 when every bundle was delivered,
 * 1 when one was not, 2 on bad arguments.
 *
 * Nothing secret goes into a NodeDiagnostic (every agent can read them): each request gets a random
 * token, kept here, whose SHA-256 is in the spec; the agent serves the bundle only to that token.
 * An upload URL is sealed to the key the node's agent publishes for the request (access.ts).
 */
import { createWriteStream, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import https from 'node:https';
import http from 'node:http';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type * as k8s from '@kubernetes/client-node';
import { KubeApiError, MERGE_PATCH, makeClients, type CustomApi, type KubeClients } from '../kube/client.ts';
import { TOKEN_HEADER, newToken, sealDestination, tokenSHA256 } from '../diagnostics/node-diagnostic/access.ts';
import { DIAGNOSTIC_CATEGORIES } from '../diagnostics/bundle.ts';
import {
  GROUP,
  PLURAL,
  TERMINAL,
  VERSION,
  parseUploadUrl,
  redactUrl,
  type NodeDiagnostic,
} from '../diagnostics/node-diagnostic/resource.ts';
import { parseDuration } from '../util/duration.ts';
import { errorMessage, messageWithCode, VigilError } from '../util/errors.ts';

export interface LogsOptions {
  kubeconfig?: string;
  selector?: string;
  output?: string;
  /** URL for every node ({node} replaced), or NODE=URL; repeatable. Nodes without one keep the bundle (node delivery). */
  uploadUrl?: string[];
  categories?: string;
  since?: string;
  timeout?: string;
  /** Fetch this bundle already kept on the node (an automatic capture's) instead of capturing. */
  bundle?: string;
}

interface Target {
  node: string;
  /** 'node' or the upload URL, sent sealed once the agent publishes its key. */
  delivery: string;
  token: string;
  sealed?: boolean;
  uid?: string;
  created: boolean;
  status?: NodeDiagnostic['status'];
  startedAt: number;
  result?: { ok: boolean; text: string };
}

const base = { group: GROUP, version: VERSION, plural: PLURAL };

export async function runLogsCommand(nodeArgs: string[], opts: LogsOptions, out: NodeJS.WriteStream = process.stdout): Promise<number> {
  const usage = (msg: string) => {
    process.stderr.write(`vigil logs: ${msg}\n`);
    return 2;
  };
  const categories = (opts.categories ?? '')
    .split(',')
    .map((c) => c.trim())
    .filter(Boolean);
  const badCategory = categories.find((c) => !(DIAGNOSTIC_CATEGORIES as readonly string[]).includes(c));
  if (badCategory) return usage(`--categories: "${badCategory}" is not one of ${DIAGNOSTIC_CATEGORIES.join(', ')}`);
  if (opts.since !== undefined && parseDuration(opts.since) === undefined) return usage(`--since: expected a duration such as 30m or 2h`);
  const timeoutMs = parseDuration(opts.timeout ?? '15m');
  if (!timeoutMs) return usage('--timeout: expected a duration such as 10m');

  const perNode = new Map<string, string>();
  let everyNode: string | undefined;
  for (const u of opts.uploadUrl ?? []) {
    // NODE=URL names one node; a bare URL is for every node without one.
    const m = /^https?:\/\//.test(u) ? null : /^([a-z0-9][a-z0-9.-]*)=(.+)$/.exec(u);
    const url = m ? m[2] : u;
    const bad = parseUploadUrl(url);
    if (typeof bad === 'string') return usage(`--upload-url: ${bad}`);
    if (m) perNode.set(m[1], url);
    else if (everyNode) return usage('--upload-url: one URL for every node at most (give others as NODE=URL)');
    else everyNode = url;
  }

  let clients: KubeClients;
  try {
    clients = makeClients(opts.kubeconfig);
  } catch (err) {
    return usage(`cannot load the kubeconfig: ${errorMessage(err)}`);
  }
  const { core, custom, kc } = clients;

  const names = [...new Set(nodeArgs)];
  try {
    if (opts.selector) {
      const list = await core.listNode({ labelSelector: opts.selector });
      for (const n of list.items) if (n.metadata?.name && !names.includes(n.metadata.name)) names.push(n.metadata.name);
    }
    for (const n of nodeArgs) await core.readNode({ name: n });
  } catch (err) {
    return usage(apiError(err));
  }
  if (!names.length) return usage(opts.selector ? `no node matches --selector ${opts.selector}` : 'name at least one NODE, or --selector');
  if (opts.bundle !== undefined && (names.length !== 1 || opts.uploadUrl?.length)) {
    return usage('--bundle: one NODE only, and no --upload-url (the kept bundle is downloaded)');
  }
  const shared = names.filter((n) => !perNode.has(n));
  if (everyNode && shared.length > 1 && !everyNode.includes('{node}')) {
    return usage(`--upload-url: ${shared.length} nodes would PUT to the same URL; put {node} in it, or give NODE=URL for each`);
  }
  for (const n of perNode.keys()) if (!names.includes(n)) return usage(`--upload-url ${n}=...: ${n} is not one of the nodes asked for`);

  const outDir = path.resolve(opts.output ?? '.');
  mkdirSync(outDir, { recursive: true });
  const targets: Target[] = names.map((node) => ({
    node,
    delivery: perNode.get(node) ?? (everyNode ? everyNode.replaceAll('{node}', encodeURIComponent(node)) : 'node'),
    token: newToken(),
    created: false,
    startedAt: Date.now(),
  }));

  let interrupted = false;
  const onSignal = () => (interrupted = true);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    for (const t of targets) await create(custom, t, categories, opts.since, opts.bundle);
    const view = new Progress(out, targets);
    const deadline = Date.now() + timeoutMs;
    while (!interrupted && targets.some((t) => !t.result)) {
      for (const t of targets.filter((x) => !x.result)) {
        await poll(custom, t);
        if (t.status?.phase && TERMINAL.includes(t.status.phase)) t.result = await finish(kc, t, outDir);
      }
      view.draw();
      if (Date.now() > deadline) {
        for (const t of targets.filter((x) => !x.result)) {
          t.result = {
            ok: false,
            text: `timed out after ${opts.timeout ?? '15m'} in phase ${t.status?.phase ?? '(none: no agent answered; is Vigil running on the node, with the CRD installed?)'}`,
          };
        }
        break;
      }
      if (targets.some((t) => !t.result)) await new Promise((r) => setTimeout(r, 1000));
    }
    view.draw(true);
    for (const t of targets) if (!t.result) t.result = { ok: false, text: 'interrupted' };
    for (const t of targets) out.write(`${t.node}: ${t.result!.text}\n`);
    return targets.every((t) => t.result!.ok) ? 0 : 1;
  } catch (err) {
    process.stderr.write(`vigil logs: ${apiError(err)}\n`);
    return 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    // The resources are requests, not records: the bundles are in DIR or at the URLs now.
    for (const t of targets.filter((x) => x.created)) {
      try {
        await custom.deleteClusterCustomObject({ ...base, name: t.node });
      } catch (err) {
        if (!(err instanceof KubeApiError && err.code === 404)) {
          process.stderr.write(`vigil logs: cannot delete NodeDiagnostic ${t.node}: ${apiError(err)}\n`);
        }
      }
    }
  }
}

async function create(
  custom: CustomApi,
  t: Target,
  categories: string[],
  since: string | undefined,
  bundle: string | undefined,
): Promise<void> {
  const body = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'NodeDiagnostic',
    metadata: { name: t.node, labels: { 'app.kubernetes.io/managed-by': 'vigil-logs' } },
    spec: {
      ...(categories.length ? { categories } : {}),
      delivery: t.delivery === 'node' ? 'node' : 'upload',
      tokenSHA256: tokenSHA256(t.token),
      ...(since ? { since } : {}),
      ...(bundle ? { bundle } : {}),
    },
  };
  for (let attempt = 0; attempt < 30; attempt++) {
    try {
      const o = (await custom.createClusterCustomObject({ ...base, body })) as NodeDiagnostic;
      t.uid = o.metadata?.uid;
      t.created = true;
      t.startedAt = Date.now();
      return;
    } catch (err) {
      if (!(err instanceof KubeApiError && err.code === 409)) throw err;
      // One per node: a finished one from an earlier run is replaced; one in progress is someone else's.
      const old = (await custom.getClusterCustomObject({ ...base, name: t.node }).catch(() => undefined)) as NodeDiagnostic | undefined;
      const phase = old?.status?.phase;
      if (old && !old.metadata?.deletionTimestamp && !(phase && TERMINAL.includes(phase))) {
        t.result = {
          ok: false,
          text: `a NodeDiagnostic for this node is already in progress (${phase ?? 'not started'}); wait, or delete it`,
        };
        return;
      }
      if (old && !old.metadata?.deletionTimestamp) await custom.deleteClusterCustomObject({ ...base, name: t.node }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  t.result = { ok: false, text: 'could not replace the earlier NodeDiagnostic for this node' };
}

async function poll(custom: CustomApi, t: Target): Promise<void> {
  try {
    const o = (await custom.getClusterCustomObject({ ...base, name: t.node })) as NodeDiagnostic;
    if (o.metadata?.uid !== t.uid) {
      t.result = { ok: false, text: 'the NodeDiagnostic was replaced by someone else' };
      t.created = false;
      return;
    }
    if (o.status?.observedUID === t.uid) t.status = o.status;
    const key = t.status?.destinationKey;
    if (t.delivery !== 'node' && !t.sealed && key && t.uid) {
      // Only the node's own agent can have written this key (the admission policy).
      const sealedDestination = sealDestination(key, t.uid, t.delivery);
      t.sealed = true;
      await custom
        .patchClusterCustomObject(
          { ...base, name: t.node, body: { metadata: { uid: t.uid }, spec: { sealedDestination } } },
          { contentType: MERGE_PATCH },
        )
        .catch((err: unknown) => {
          // A hiccup is tried again on the next poll; a refusal (RBAC: patch) ends this node.
          if (err instanceof KubeApiError && err.code >= 400 && err.code < 500)
            t.result = { ok: false, text: `cannot send the upload destination: ${apiError(err)}` };
          else t.sealed = false;
        });
    }
  } catch (err) {
    if (err instanceof KubeApiError && err.code === 404) {
      t.result = { ok: false, text: 'the NodeDiagnostic was deleted by someone else' };
      t.created = false;
    }
    // Anything else (an API server hiccup): the next poll tries again.
  }
}

async function finish(kc: k8s.KubeConfig, t: Target, outDir: string): Promise<{ ok: boolean; text: string }> {
  const s = t.status ?? {};
  const location = s.location ?? '';
  const onNode = s.keptOnNode === true && location.startsWith('/api/');
  const note = s.manifest?.failedCollectors ? ` (${s.manifest.failedCollectors} collector(s) failed; see manifest.json)` : '';
  if (s.phase === 'Succeeded' && !onNode) return { ok: true, text: `uploaded to ${redactUrl(t.delivery)} (${s.bytes ?? 0} bytes)${note}` };
  if (!onNode) return { ok: false, text: `failed: ${s.message ?? 'no reason given'}` };
  const file = path.join(outDir, path.basename(decodeURIComponent(location)));
  try {
    const bytes = await download(kc, location, file, t.token);
    if (s.bytes !== undefined && bytes !== s.bytes)
      throw new VigilError('VIGIL_E_DOWNLOAD_SIZE', `got ${bytes} bytes, the agent reported ${s.bytes}`);
    if (s.phase === 'Succeeded') return { ok: true, text: `saved ${file} (${bytes} bytes)${note}` };
    return { ok: false, text: `failed: ${s.message ?? ''}; fetched the bundle kept on the node instead: ${file} (${bytes} bytes)` };
  } catch (err) {
    const why = `cannot download ${location} through the API server: ${messageWithCode(err)}`;
    return { ok: false, text: s.phase === 'Succeeded' ? why : `failed: ${s.message ?? ''}; ${why}` };
  }
}

/** GET an API server path (the node proxy) into `file`, through a temporary name; returns its size. */
async function download(kc: k8s.KubeConfig, apiPath: string, file: string, token: string): Promise<number> {
  const server = new URL(kc.getCurrentCluster()!.server);
  const opts: https.RequestOptions = {
    method: 'GET',
    protocol: server.protocol,
    hostname: server.hostname,
    port: server.port,
    path: `${server.pathname.replace(/\/$/, '')}${apiPath}`,
    // The node proxy forwards this header to the agent (it strips Authorization).
    headers: { accept: 'application/gzip', [TOKEN_HEADER]: token },
    timeout: 60_000,
  };
  await kc.applyToHTTPSOptions(opts);
  const part = `${file}.part`;
  try {
    await new Promise<void>((resolve, reject) => {
      const req = (server.protocol === 'http:' ? http : https).request(opts, (res) => {
        if (res.statusCode !== 200) {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d.slice(0, 500)));
          res.once('end', () => reject(new Error(`HTTP ${res.statusCode}: ${apiMessage(body)}`)));
          return;
        }
        pipeline(res, createWriteStream(part, { mode: 0o600 })).then(resolve, reject);
      });
      req.once('timeout', () => req.destroy(new Error('no data for 60 s')));
      req.once('error', reject);
      req.end();
    });
    renameSync(part, file);
    return statSync(file).size;
  } finally {
    rmSync(part, { force: true });
  }
}

/** One line per node; redrawn in place on a terminal, a new line per change otherwise. */
class Progress {
  private drawn = 0;
  private readonly last = new Map<string, string>();

  constructor(
    private readonly out: NodeJS.WriteStream,
    private readonly targets: Target[],
  ) {}

  draw(final = false): void {
    const width = Math.max(4, ...this.targets.map((t) => t.node.length));
    const lines = this.targets.map((t) => {
      const phase = t.result && !t.status?.phase ? 'Failed' : (t.status?.phase ?? 'Waiting');
      const secs = Math.round((Date.now() - t.startedAt) / 1000);
      const msg = t.status?.message ? `  ${t.status.message.slice(0, 100)}` : '';
      return {
        node: t.node,
        key: `${phase}|${t.status?.bytes ?? 0}`,
        text: `${t.node.padEnd(width)}  ${phase.padEnd(10)} ${formatBytes(t.status?.bytes).padStart(9)}  ${String(secs).padStart(4)}s${msg}`,
      };
    });
    if (this.out.isTTY) {
      if (this.drawn) this.out.write(`\x1b[${this.drawn}A`);
      for (const l of lines) this.out.write(`\x1b[2K${l.text}\n`);
      this.drawn = lines.length;
      return;
    }
    for (const l of lines) {
      if (this.last.get(l.node) === l.key && !final) continue;
      if (final && this.last.get(l.node) === l.key) continue;
      this.last.set(l.node, l.key);
      this.out.write(`${l.text}\n`);
    }
  }
}

function formatBytes(n: number | undefined): string {
  if (n === undefined) return '-';
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

function apiMessage(body: string): string {
  try {
    const j = JSON.parse(body) as { message?: unknown };
    if (typeof j.message === 'string') return j.message;
  } catch {
    /* not JSON */
  }
  return body.trim();
}

function apiError(err: unknown): string {
  if (err instanceof KubeApiError) {
    const msg = apiMessage(err.body);
    const hint =
      err.code === 404 && /nodediagnostics/.test(msg)
        ? ' (is the NodeDiagnostic CRD installed? deploy/crds/nodediagnostic.yaml)'
        : err.code === 403
          ? ' (vigil logs needs the rights in deploy/rbac-logs.yaml)'
          : '';
    return `${err.code}: ${msg}${hint}`;
  }
  return errorMessage(err);
}
