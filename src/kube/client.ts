/**
 * The only module that builds Kubernetes clients. Chooses in-cluster config or a kubeconfig, and
 * turns API errors into plain {status, message} values the sink can act on.
 *
 * The agent's requests go over Node's https with client-node's KubeConfig for everything about
 * identity (kubeconfig or in-cluster, token files read again on every request, exec plugins,
 * client certificates), not through client-node's generated API classes. Those load every model
 * of every API group (its ObjectSerializer's type map) and cost the agent about 7.6 MiB of RSS
 * (1.57 MB of bundled code, measured with a bundle that kept only KubeConfig: 52.5 vs 60.1 MiB) and
 * about 1.7 ms per request on loopback (an Event create: 5.1 ms through them, 3.4 ms here), for the
 * few calls below. scripts/bundle.ts marks client-node side-effect free so what is not used is
 * left out.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import * as k8s from '@kubernetes/client-node';
import { IN_CLUSTER_TOKEN } from './detect.ts';
import { VERSION } from '../util/version.ts';
import { errorMessage } from '../util/errors.ts';
import { Backoff } from '../util/backoff.ts';

export { kubeConfigAvailable, resolveNodeName } from './detect.ts';

/** reportingController of every Event and Node write Vigil makes. */
export const REPORTING_CONTROLLER = 'vigil.dev/node-health-agent';

/** Posts an Event about this Node from beside the engine (diagnostic captures); the sink's EventRecorder is one. */
export interface NodeEventRecorder {
  record(reason: string, note: string, type?: 'Warning' | 'Normal'): void;
}

/** One request's options: its deadline, and the Content-Type of a patch or the Accept of a list. */
export interface RequestOptions {
  /**
   * Destroys the request (RequestTimeoutError) when no answer is complete by then. A plain timer:
   * an AbortSignal per request cost about 0.1 ms in the interpreter.
   */
  timeoutMs?: number;
  contentType?: string;
  accept?: string;
}

/** The calls the agent makes on core/v1 Nodes (named and shaped as client-node's CoreV1Api). */
export interface CoreApi {
  readNode(p: { name: string }, o?: RequestOptions): Promise<k8s.V1Node>;
  patchNode(p: { name: string; body: object }, o?: RequestOptions): Promise<k8s.V1Node>;
  patchNodeStatus(p: { name: string; body: object }, o?: RequestOptions): Promise<k8s.V1Node>;
  listNode(p?: { labelSelector?: string; limit?: number; _continue?: string }, o?: RequestOptions): Promise<k8s.V1NodeList>;
}

/** events.k8s.io/v1 Events. */
export interface EventsApi {
  /** `dryRun: 'All'`: validated and admitted, never stored (the sink's preflight). */
  createNamespacedEvent(p: { namespace: string; body: k8s.EventsV1Event; dryRun?: 'All' }, o?: RequestOptions): Promise<k8s.EventsV1Event>;
  patchNamespacedEvent(p: { name: string; namespace: string; body: object }, o?: RequestOptions): Promise<k8s.EventsV1Event>;
}

/** Cluster-scoped custom resources (NodeDiagnostic). */
export interface CustomApi {
  listClusterCustomObject(
    p: { group: string; version: string; plural: string; fieldSelector?: string },
    o?: RequestOptions,
  ): Promise<unknown>;
  patchClusterCustomObjectStatus(
    p: { group: string; version: string; plural: string; name: string; body: object },
    o?: RequestOptions,
  ): Promise<unknown>;
  /** `vigil logs`: the sealed upload destination goes into the spec. */
  patchClusterCustomObject(
    p: { group: string; version: string; plural: string; name: string; body: object },
    o?: RequestOptions,
  ): Promise<unknown>;
  getClusterCustomObject(p: { group: string; version: string; plural: string; name: string }, o?: RequestOptions): Promise<unknown>;
  createClusterCustomObject(p: { group: string; version: string; plural: string; body: object }, o?: RequestOptions): Promise<unknown>;
  deleteClusterCustomObject(p: { group: string; version: string; plural: string; name: string }, o?: RequestOptions): Promise<unknown>;
}

export interface KubeClients {
  core: CoreApi;
  events: EventsApi;
  /** NodeDiagnostic resources (src/diagnostics/node-diagnostic). */
  custom: CustomApi;
  /** For watches (client-node's Watch). */
  kc: k8s.KubeConfig;
  server: string;
}

/** Sent on every request, so audit logs and API Priority and Fairness can tell Vigil apart. */
export const USER_AGENT = `vigil/${VERSION}`;

/** A response other than 2xx: the status, the server's text and headers (a Status object's message is in `body`). */
export class KubeApiError extends Error {
  override readonly name = 'KubeApiError';
  constructor(
    readonly code: number,
    readonly body: string,
    readonly headers: Record<string, string>,
    what: string,
  ) {
    super(`${what}: HTTP ${code}`);
  }
}

/** What makes two TLS agents interchangeable: the options client-node builds an agent from. */
const TLS_KEYS = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'] as const;

/**
 * How long requests reuse the identity client-node applied for an earlier one (its headers, TLS
 * options and agent). client-node reads the CA, certificate and key files again and builds an
 * https.Agent on every call: about 0.2 ms in the interpreter before a fault's Event can go out.
 * client-go re-reads a token file once a minute too; a rotated token or certificate stays valid
 * well past that (the kubelet rotates both long before they expire). A 401 drops it at once.
 */
export const IDENTITY_TTL_MS = 60_000;

export interface ClientTuning {
  /** Re-apply the identity in the background every IDENTITY_TTL_MS / 2, so a request after a long quiet finds it ready (the agent). */
  keepIdentityFresh?: boolean;
  /**
   * Keep one Event create ready (the agent): its request prepared on a kept-alive connection of its
   * own, so a fault's Event is written in the turn that found it. See ReadyRequest.
   */
  readyEventCreate?: boolean;
  /** Test seam (default performance.now). */
  now?: () => number;
}

/**
 * A request made ahead of need, for the one write whose latency matters most: a newly failing
 * part's Event. Node's ClientRequest takes its socket on the next tick, so a request made in a
 * turn is written only after everything else that turn does (the engine's condition work, the
 * other sinks, the reader's re-arm: 0.5-1 ms in the interpreter on a fresh agent's first fault,
 * before the 0.4 ms of building it). This one was built (headers, socket) while the agent was
 * idle; nothing of it is sent until send() sets its length and writes the body, in that turn.
 * It holds a kept-alive connection of its own, so the agent has a second one to the API server
 * while it is ready. It is made after an Event create finishes (the start's dry-run preflight
 * too), with the identity of that moment, and dropped when the server closes its idle connection
 * (90 s for kube-apiserver) or the identity changes; the next create then goes the usual way, and
 * a new one is made after it.
 */
interface ReadyRequest {
  req: http.ClientRequest;
  path: string;
  base: https.RequestOptions;
}

/**
 * Requests with the KubeConfig's identity over kept-alive connections. client-node builds a new
 * https.Agent for every request, so every call would pay a TLS handshake (about 7 ms of a 12 ms
 * node status PATCH on loopback). The identity it applies (a rotated token file is read again) is
 * kept for IDENTITY_TTL_MS; the agent it built is swapped for a kept-alive one with the same TLS
 * options, made anew when those change (a rotated client certificate). Proxy agents are left as
 * they are.
 */
class Rest {
  private pooled: { key: string; agent: https.Agent; ready: https.Agent } | undefined;
  private identity: { at: number; opts: https.RequestOptions } | undefined;
  private applying: Promise<https.RequestOptions> | undefined;
  private refresh: NodeJS.Timeout | undefined;
  private ready: ReadyRequest | undefined;
  /** Plain-HTTP API servers (tests): the ready request's agent. */
  private plainReady: http.Agent | undefined;
  private readonly now: () => number;

  constructor(
    private readonly kc: k8s.KubeConfig,
    private readonly server: string,
    private readonly tuning: ClientTuning = {},
  ) {
    this.now = tuning.now ?? (() => performance.now());
  }

  async request<T>(
    method: string,
    path: string,
    query: Record<string, string | number | undefined>,
    body: object | undefined,
    o: RequestOptions = {},
    keepReady = false,
  ): Promise<T> {
    const id = this.identity;
    const age = id ? this.now() - id.at : Infinity;
    if (!id || age >= IDENTITY_TTL_MS) return this.send<T>(await this.apply(), method, path, query, body, o, keepReady);
    // Within the TTL the request is built in this turn, with no await before it; past half of it the identity is applied again beside.
    if (age >= IDENTITY_TTL_MS / 2) void this.apply().catch(() => {});
    return this.send<T>(id.opts, method, path, query, body, o, keepReady);
  }

  /** The ready request, when it is one for this call; it is then no longer ready. */
  private takeReady(
    base: https.RequestOptions,
    method: string,
    path: string,
    query: Record<string, string | number | undefined>,
    o: RequestOptions,
  ): ReadyRequest | undefined {
    const r = this.ready;
    if (!r || method !== 'POST' || r.path !== path || o.contentType || o.accept || !sameIdentity(r.base, base)) return undefined;
    for (const v of Object.values(query)) if (v !== undefined && v !== '') return undefined;
    if (r.req.destroyed) return (this.ready = undefined);
    this.ready = undefined;
    return r;
  }

  /** Makes a POST to `path` ready on a connection of its own (see ReadyRequest), with the current identity. */
  private prepare(path: string): void {
    const id = this.identity;
    if (this.ready || !id || this.now() - id.at >= IDENTITY_TTL_MS) return;
    const agent = this.readyAgent(id.opts);
    if (!agent) return;
    const headers = requestHeaders(id.opts, {}, true);
    const req = (agent instanceof https.Agent ? https : http).request(this.url(path), { ...id.opts, method: 'POST', headers, agent });
    const r: ReadyRequest = { req, path, base: id.opts };
    // Until it is used: a closed connection only means it is no longer ready, and it keeps no process alive.
    req.on('error', () => {
      if (this.ready === r) this.ready = undefined;
    });
    req.on('socket', (socket) => {
      if (this.ready === r) socket.unref();
    });
    this.ready = r;
  }

  /** The kept-alive agent a ready request goes through: none behind a proxy's agent. */
  private readyAgent(opts: https.RequestOptions): http.Agent | undefined {
    if (this.pooled && opts.agent === this.pooled.agent) return this.pooled.ready;
    if (opts.agent?.constructor === http.Agent) return (this.plainReady ??= new http.Agent({ keepAlive: true }));
    return undefined;
  }

  private url(path: string): URL {
    return new URL(this.server.replace(/\/+$/, '') + path);
  }

  private dropReady(): void {
    const r = this.ready;
    this.ready = undefined;
    r?.req.destroy();
  }

  /** Applies the KubeConfig's identity once for every request waiting on it. */
  private apply(): Promise<https.RequestOptions> {
    this.applying ??= (async () => {
      try {
        const opts: https.RequestOptions = { headers: {} };
        await this.kc.applyToHTTPSOptions(opts);
        this.keepAlive(opts);
        this.identity = { at: this.now(), opts };
        if (this.ready && !sameIdentity(this.ready.base, opts)) this.dropReady();
        if (this.tuning.keepIdentityFresh) {
          clearTimeout(this.refresh);
          this.refresh = setTimeout(() => void this.apply().catch(() => {}), IDENTITY_TTL_MS / 2).unref();
        }
        return opts;
      } finally {
        this.applying = undefined;
      }
    })();
    return this.applying;
  }

  private send<T>(
    base: https.RequestOptions,
    method: string,
    path: string,
    query: Record<string, string | number | undefined>,
    body: object | undefined,
    o: RequestOptions,
    keepReady = false,
  ): Promise<T> {
    const ready = keepReady ? this.takeReady(base, method, path, query, o) : undefined;
    const text = body === undefined ? undefined : JSON.stringify(body);
    const what = `${method} ${path}`;
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const fail = (err: Error) => {
        clearTimeout(timer);
        reject(err);
      };
      const answer = (res: http.IncomingMessage) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', fail);
        res.on('end', () => {
          clearTimeout(timer);
          // The connection goes back to its agent on the next tick: a new ready request takes it after that.
          if (keepReady) setImmediate(() => this.prepare(path));
          const data = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status < 200 || status > 299) {
            // Refused credentials: the next request applies them again (an expired exec-plugin token).
            if (status === 401 && this.identity?.opts === base) {
              this.identity = undefined;
              this.dropReady();
            }
            const h: Record<string, string> = {};
            for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h[k] = Array.isArray(v) ? v.join(', ') : v;
            reject(new KubeApiError(status, data, h, what));
            return;
          }
          try {
            resolve((data ? JSON.parse(data) : undefined) as T);
          } catch (err) {
            reject(new Error(`${what}: the response is not JSON (${errorMessage(err)})`));
          }
        });
      };
      let req: http.ClientRequest;
      if (ready) {
        req = ready.req;
        req.socket?.ref();
        if (text !== undefined) req.setHeader('Content-Length', Buffer.byteLength(text));
        // Written here, in this turn: what only the answer needs is attached after (its events come later).
        req.end(text);
        req.once('response', answer);
      } else {
        const headers = requestHeaders(base, o, text !== undefined);
        if (text !== undefined) headers['Content-Length'] = Buffer.byteLength(text);
        const url = this.url(path);
        for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
        req = (url.protocol === 'http:' ? http : https).request(url, { ...base, method, headers }, answer);
      }
      req.on('error', fail);
      if (o.timeoutMs !== undefined) {
        const ms = o.timeoutMs;
        timer = setTimeout(() => req.destroy(new RequestTimeoutError(`${what} timed out after ${ms} ms`)), ms);
      }
      if (!ready) req.end(text);
    });
  }

  private keepAlive(opts: https.RequestOptions): void {
    const fresh = opts.agent;
    if (!fresh || fresh.constructor !== https.Agent) return;
    const agentOpts = (fresh as https.Agent & { options: https.AgentOptions }).options;
    const h = createHash('sha256');
    for (const k of TLS_KEYS)
      h.update(`${k}=${String(agentOpts[k] instanceof Buffer ? agentOpts[k].toString('base64') : JSON.stringify(agentOpts[k]))};`);
    const key = h.digest('hex');
    if (this.pooled?.key !== key) {
      this.pooled?.agent.destroy();
      this.pooled?.ready.destroy();
      this.dropReady();
      const tls = Object.fromEntries(TLS_KEYS.map((k) => [k, agentOpts[k]]));
      this.pooled = { key, agent: new https.Agent({ ...tls, keepAlive: true }), ready: new https.Agent({ ...tls, keepAlive: true }) };
    }
    opts.agent = this.pooled.agent;
  }
}

/** A request's headers: the identity's, then what says who sends and what is sent and wanted. */
function requestHeaders(base: https.RequestOptions, o: RequestOptions, withBody: boolean): http.OutgoingHttpHeaders {
  const headers: http.OutgoingHttpHeaders = { ...(base.headers as http.OutgoingHttpHeaders) };
  headers['User-Agent'] = USER_AGENT;
  headers.Accept = o.accept ?? 'application/json';
  if (withBody) headers['Content-Type'] = o.contentType ?? 'application/json';
  return headers;
}

/** Whether requests made with `b` would carry the same credentials as those made with `a`. */
function sameIdentity(a: https.RequestOptions, b: https.RequestOptions): boolean {
  if (a === b) return true;
  if (a.agent !== b.agent) return false;
  const ha = (a.headers ?? {}) as Record<string, unknown>;
  const hb = (b.headers ?? {}) as Record<string, unknown>;
  const keys = Object.keys(ha);
  return keys.length === Object.keys(hb).length && keys.every((k) => ha[k] === hb[k]);
}

/** A list's `continue` token is `_continue` in client-node's types (its serializer renames it). */
function withContinue(list: k8s.V1NodeList & { metadata?: { continue?: string } }): k8s.V1NodeList {
  if (list.metadata?.continue !== undefined) list.metadata._continue = list.metadata.continue;
  return list;
}

const enc = encodeURIComponent;
/** client-node's default for a patch without a Content-Type. */
const JSON_PATCH = 'application/json-patch+json';

/**
 * `context` and `server` act as kubectl's --context and --server: another context of the
 * kubeconfig, and another API server address for its cluster (same credentials and CA).
 */
export function makeClients(
  kubeconfig?: string,
  override: { context?: string; server?: string } = {},
  tuning: ClientTuning = {},
): KubeClients {
  const kc = new k8s.KubeConfig();
  if (kubeconfig) kc.loadFromFile(kubeconfig);
  else if (!override.context && process.env.KUBERNETES_SERVICE_HOST && existsSync(IN_CLUSTER_TOKEN)) kc.loadFromCluster();
  else kc.loadFromDefault();
  if (override.context) {
    if (!kc.getContextObject(override.context)) throw new Error(`context "${override.context}" does not exist`);
    kc.setCurrentContext(override.context);
  }
  const server = override.server ?? kc.getCurrentCluster()?.server;
  if (!server) throw new Error('the kubeconfig has no current cluster');
  const rest = new Rest(kc, server, tuning);
  const patch = <T>(path: string, body: object, o?: RequestOptions) =>
    rest.request<T>('PATCH', path, {}, body, { ...o, contentType: o?.contentType ?? JSON_PATCH });
  const custom = (p: { group: string; version: string; plural: string }) => `/apis/${enc(p.group)}/${enc(p.version)}/${enc(p.plural)}`;
  return {
    core: {
      readNode: (p, o) => rest.request('GET', `/api/v1/nodes/${enc(p.name)}`, {}, undefined, o),
      patchNode: (p, o) => patch(`/api/v1/nodes/${enc(p.name)}`, p.body, o),
      patchNodeStatus: (p, o) => patch(`/api/v1/nodes/${enc(p.name)}/status`, p.body, o),
      listNode: async (p = {}, o) =>
        withContinue(
          await rest.request(
            'GET',
            '/api/v1/nodes',
            { labelSelector: p.labelSelector, limit: p.limit, continue: p._continue },
            undefined,
            o,
          ),
        ),
    },
    events: {
      createNamespacedEvent: (p, o) =>
        rest.request(
          'POST',
          `/apis/events.k8s.io/v1/namespaces/${enc(p.namespace)}/events`,
          { dryRun: p.dryRun },
          p.body,
          o,
          tuning.readyEventCreate,
        ),
      patchNamespacedEvent: (p, o) => patch(`/apis/events.k8s.io/v1/namespaces/${enc(p.namespace)}/events/${enc(p.name)}`, p.body, o),
    },
    custom: {
      listClusterCustomObject: (p, o) => rest.request('GET', custom(p), { fieldSelector: p.fieldSelector }, undefined, o),
      patchClusterCustomObjectStatus: (p, o) => patch(`${custom(p)}/${enc(p.name)}/status`, p.body, o),
      patchClusterCustomObject: (p, o) => patch(`${custom(p)}/${enc(p.name)}`, p.body, o),
      getClusterCustomObject: (p, o) => rest.request('GET', `${custom(p)}/${enc(p.name)}`, {}, undefined, o),
      createClusterCustomObject: (p, o) => rest.request('POST', custom(p), {}, p.body, o),
      deleteClusterCustomObject: (p, o) => rest.request('DELETE', `${custom(p)}/${enc(p.name)}`, {}, undefined, o),
    },
    kc,
    server,
  };
}

export interface ApiFailure {
  /** HTTP status, or 0 when the server could not be reached or timed out. */
  status: number;
  message: string;
  retryAfterMs?: number;
  /** The request passed its deadline (status 0). */
  timedOut?: boolean;
}

/** A request abandoned at its deadline. */
export class RequestTimeoutError extends Error {
  override readonly name = 'RequestTimeoutError';
}

export function toFailure(err: unknown): ApiFailure {
  if (err instanceof KubeApiError) {
    let message = err.body.trim() || err.message;
    try {
      const body: unknown = JSON.parse(err.body);
      if (typeof body === 'object' && body !== null && 'message' in body && typeof body.message === 'string' && body.message) {
        message = body.message;
      }
    } catch {
      /* body was not JSON */
    }
    const ra = Number(err.headers?.['retry-after']);
    return { status: err.code, message, ...(Number.isFinite(ra) && ra > 0 ? { retryAfterMs: ra * 1000 } : {}) };
  }
  return { status: 0, message: errorMessage(err), ...(err instanceof RequestTimeoutError ? { timedOut: true } : {}) };
}

/**
 * Runs one request with a deadline that really aborts it (a timed-out write that lands later could
 * overwrite a newer one): `send` gets the request options to pass to the client. An aborted
 * request becomes a plain "timed out" error (status 0 for toFailure).
 */
export async function withDeadline<T>(
  ms: number,
  what: string,
  send: (opts: RequestOptions) => Promise<T>,
  contentType?: string,
): Promise<T> {
  try {
    return await send({ timeoutMs: ms, ...(contentType ? { contentType } : {}) });
  } catch (err) {
    const name = typeof err === 'object' && err !== null && 'name' in err ? err.name : undefined;
    if (err instanceof RequestTimeoutError || name === 'AbortError' || name === 'TimeoutError')
      throw new RequestTimeoutError(`${what} timed out after ${ms} ms`, { cause: err });
    throw err;
  }
}

/** The API server's own limit for a request (kube-apiserver --request-timeout, 60 s by default). */
const SERVER_REQUEST_TIMEOUT_MS = 60_000;

/**
 * One writer's requests to the API server: their deadline and the wait before a retry, both
 * following the server's latency. An overloaded API server finishes a request its client gave up
 * on, so a fixed 10 s deadline with quick retries made every retry more work for it, and 5,000
 * agents starting at once never got through (docs/benchmarks.md). So a request that times out (or
 * that the server ends with 504) doubles the next one's deadline, up to the server's own 60 s; a
 * retry after a timeout, a 429 or a 5xx waits at least about as long as the failed try took; an
 * answer halves the deadline back toward its base.
 */
export class ApiPacer {
  private readonly backoff: Backoff;
  private deadlineMs: number;
  private lastElapsedMs = 0;

  private readonly random: () => number;
  private readonly now: () => number;

  constructor(
    private readonly baseTimeoutMs: number,
    retry: { baseMs: number; maxMs: number },
    o: { random?: () => number; now?: () => number } = {},
  ) {
    this.deadlineMs = baseTimeoutMs;
    this.random = o.random ?? Math.random;
    this.now = o.now ?? (() => performance.now());
    this.backoff = new Backoff(retry.baseMs, retry.maxMs, this.random);
  }

  /** The deadline the next request gets. */
  get timeoutMs(): number {
    return this.deadlineMs;
  }

  /** Runs one request under the current deadline (at most `capMs`: a shutdown's last write). */
  async request<T>(what: string, send: (opts: RequestOptions) => Promise<T>, contentType?: string, capMs = Infinity): Promise<T> {
    const t0 = this.now();
    try {
      const r = await withDeadline(Math.min(this.deadlineMs, capMs), what, send, contentType);
      this.deadlineMs = Math.max(this.baseTimeoutMs, Math.round(this.deadlineMs / 2));
      return r;
    } catch (err) {
      this.lastElapsedMs = this.now() - t0;
      if (err instanceof RequestTimeoutError || (err instanceof KubeApiError && err.code === 504)) {
        this.deadlineMs = Math.min(Math.max(this.baseTimeoutMs, SERVER_REQUEST_TIMEOUT_MS), this.deadlineMs * 2);
      }
      throw err;
    }
  }

  /** A request (or a sequence of them) went through: the next failure starts the backoff again. */
  succeeded(): void {
    this.backoff.reset();
  }

  /** How long to wait before retrying after `f`, the failure of the last request. */
  retryDelay(f: ApiFailure): number {
    if (f.retryAfterMs !== undefined) return f.retryAfterMs;
    const step = this.backoff.next();
    const overloaded = f.timedOut === true || f.status === 429 || f.status >= 500;
    if (!overloaded) return step;
    return Math.max(step, Math.round(this.lastElapsedMs * (0.5 + this.random() * 0.5)));
  }
}

export const STRATEGIC_MERGE = 'application/strategic-merge-patch+json';
export const MERGE_PATCH = 'application/merge-patch+json';
