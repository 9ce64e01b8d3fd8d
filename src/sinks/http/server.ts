/**
 * The agent's local HTTP endpoints: /metrics (Prometheus), /healthz (liveness, with each
 * source's state), /conditions (current node health as JSON).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { NodeHealth } from '../../api/types.ts';

export interface StatusProvider {
  health(): NodeHealth;
  /** Per-component state for /healthz, e.g. {kmsg: 'ok', nvml: 'disabled'}. */
  components(): Record<string, string>;
}

export class HttpServer {
  private server: http.Server | undefined;

  constructor(
    private readonly registry: Registry,
    private readonly status: StatusProvider,
  ) {}

  async listen(hostPort: string): Promise<AddressInfo> {
    const i = hostPort.lastIndexOf(':');
    const host = hostPort.slice(0, i) || '0.0.0.0';
    const port = Number(hostPort.slice(i + 1));
    const server = http.createServer((req, res) => void this.route(req, res));
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
        case '/healthz':
          return send(res, 200, 'application/json', JSON.stringify({ status: 'ok', components: this.status.components() }) + '\n');
        case '/conditions':
          return send(res, 200, 'application/json', JSON.stringify(this.status.health(), null, 2) + '\n');
        default:
          return send(res, 404, 'text/plain', 'not found: try /conditions, /metrics or /healthz\n');
      }
    } catch (err) {
      send(res, 500, 'text/plain', `${(err as Error).message}\n`);
    }
  }

  async close(): Promise<void> {
    const s = this.server;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
}

function send(res: http.ServerResponse, code: number, type: string, body: string): void {
  res.writeHead(code, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}
