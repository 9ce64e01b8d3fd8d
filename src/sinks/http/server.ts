/**
 * The agent's local HTTP endpoints: /metrics (Prometheus), /healthz (503 while a source cannot
 * see or a part failed, 200 "degraded" while something was lost, with each component's state),
 * /livez (200 while the process serves: for a liveness probe that must not restart a blind agent
 * forever), /conditions (current node health as JSON).
 */
import { createReadStream } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, type Registry } from 'prom-client';
import type { NodeHealth } from '../../api/types.ts';
import type { ComponentHealth } from '../../health/index.ts';
import { errorMessage } from '../../util/errors.ts';
import { connectionCap, DEFAULT_MAX_CONNECTIONS, limitConnections, openFileLimit } from './connection-limit.ts';

export interface StatusProvider {
  health(): NodeHealth;
  /** The agent's own health for /healthz. */
  agentHealth(): { status: 'ok' | 'degraded' | 'failed'; components: Record<string, ComponentHealth> };
  /**
   * A diagnostic bundle this agent kept (src/diagnostics/node-diagnostic), by file name, for the
   * token of the NodeDiagnostic that produced it; 'forbidden' for another token or name.
   */
  diagnosticBundle?(name: string, token: string): { path: string; bytes: number } | 'forbidden' | undefined;
}

/** Connection limits of the agent's port (issue #22 point 10); the defaults suit every deployment. */
export interface ConnectionLimits {
  /** At most this many open connections (default 512; never more than half the descriptor limit). */
  maxConnections?: number;
  /** A connection idle this long, or still sending its headers, is closed (default 10 s). */
  idleTimeoutMs?: number;
}

const IDLE_TIMEOUT_MS = 10_000;

export class HttpServer {
  private server: http.Server | undefined;

  constructor(
    private readonly registry: Registry,
    private readonly status: StatusProvider,
  ) {}

  async listen(hostPort: string, limits: ConnectionLimits = {}): Promise<AddressInfo> {
    const i = hostPort.lastIndexOf(':');
    const host = hostPort.slice(0, i) || '0.0.0.0';
    const port = Number(hostPort.slice(i + 1));
    const idleMs = limits.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
    // Every stage of a connection has a deadline, so a client cannot hold a descriptor forever.
    const server = http.createServer(
      {
        headersTimeout: idleMs,
        requestTimeout: 3 * idleMs,
        connectionsCheckingInterval: Math.min(idleMs, 5000),
      },
      (req, res) => void this.route(req, res),
    );
    // Socket inactivity, including a connection that never sends a byte (the headers timeout
    // is only checked every connectionsCheckingInterval); with no 'timeout' listener Node destroys it.
    server.timeout = idleMs;
    server.keepAliveTimeout = Math.min(5000, idleMs);
    const cap = connectionCap(limits.maxConnections ?? DEFAULT_MAX_CONNECTIONS, openFileLimit());
    const shed = shedCounter(this.registry);
    limitConnections(server, cap, (reason) => shed.inc({ reason }));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    return server.address() as AddressInfo;
  }

  private async route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    try {
      const url = new URL(req.url ?? '/', 'http://x');
      if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'method not allowed\n');
      switch (url.pathname) {
        case '/metrics':
          return send(res, 200, this.registry.contentType, await this.registry.metrics());
        case '/healthz': {
          const h = this.status.agentHealth();
          return send(res, h.status === 'failed' ? 503 : 200, 'application/json', JSON.stringify(h) + '\n');
        }
        case '/livez':
          return send(res, 200, 'text/plain', 'ok\n');
        case '/conditions':
          return send(res, 200, 'application/json', JSON.stringify(this.status.health(), null, 2) + '\n');
        default:
          if (url.pathname.startsWith('/diagnostics/')) return this.bundle(req, res, url.pathname.slice('/diagnostics/'.length));
          return send(res, 404, 'text/plain', 'not found: try /conditions, /metrics, /healthz or /livez\n');
      }
    } catch (err) {
      send(res, 500, 'text/plain', `${errorMessage(err)}\n`);
    }
  }

  /**
   * Streams a kept bundle (fetched through the API server's node proxy by `vigil logs`) to the
   * holder of its request's token, sent in X-Vigil-Token (the proxy strips Authorization): 401
   * without one, 403 with any other (or for a name the token was not given).
   */
  private bundle(req: http.IncomingMessage, res: http.ServerResponse, raw: string): void {
    const token = req.headers['x-vigil-token'];
    if (typeof token !== 'string' || !token) {
      res.setHeader('www-authenticate', 'X-Vigil-Token');
      return send(res, 401, 'text/plain', 'a diagnostic bundle needs its NodeDiagnostic token (X-Vigil-Token)\n');
    }
    let name: string;
    try {
      name = decodeURIComponent(raw);
    } catch {
      name = '';
    }
    const b = name ? this.status.diagnosticBundle?.(name, token) : 'forbidden';
    if (b === 'forbidden') return send(res, 403, 'text/plain', 'this token does not grant this diagnostic bundle\n');
    if (!b) return send(res, 404, 'text/plain', 'no such diagnostic bundle\n');
    res.writeHead(200, { 'content-type': 'application/gzip', 'content-length': String(b.bytes), 'cache-control': 'no-store' });
    if (req.method === 'HEAD') return void res.end();
    createReadStream(b.path)
      .once('error', () => res.destroy())
      .pipe(res);
  }

  async close(): Promise<void> {
    const s = this.server;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
}

/** One counter per registry (a second server on the same registry shares it). */
function shedCounter(registry: Registry): Counter<'reason'> {
  const name = 'vigil_http_connections_shed_total';
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Counter<'reason'>;
  return new Counter({
    name,
    help: 'HTTP connections closed at the connection cap: evicted (the least recently active idle one) or refused (all busy).',
    labelNames: ['reason'],
    registers: [registry],
  });
}

function send(res: http.ServerResponse, code: number, type: string, body: string): void {
  res.writeHead(code, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}
