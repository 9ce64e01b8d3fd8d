/** Runtime probes: kubelet /healthz over HTTP, containerd's CRI socket over gRPC, units via systemctl. */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { exists } from '../../sources/host/read.ts';
import { hostPath } from '../../sources/host/paths.ts';
import type { ExecFn } from '../../sources/host/exec.ts';
import { parseSystemctlShow, type ProbeResult, type UnitState } from './checks.ts';
import { errorCode, errorMessage, VigilError } from '../../util/errors.ts';

const code = (err: unknown) => errorCode(err) ?? errorMessage(err);

/** GET the healthz URL; 200 with body "ok" is healthy. Nothing listening is "absent". */
export function probeKubelet(url: string, timeoutMs: number, signal?: AbortSignal): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const req = http.get(url, { timeout: timeoutMs, signal, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        if (body.length < 1024) body += c;
      });
      res.on('end', () => {
        if (res.statusCode === 200 && body.trim() === 'ok') resolve({ kind: 'ok' });
        else resolve({ kind: 'bad', detail: `HTTP ${res.statusCode}: ${body.trim().slice(0, 200)}` });
      });
      res.on('error', (err) => resolve({ kind: 'bad', detail: code(err) }));
    });
    let timedOut = false;
    req.on('timeout', () => ((timedOut = true), req.destroy()));
    req.on('error', (err) => {
      if (timedOut) resolve({ kind: 'bad', detail: `no answer within ${timeoutMs}ms` });
      else if (code(err) === 'ECONNREFUSED') resolve({ kind: 'absent', detail: 'connection refused' });
      else resolve({ kind: 'bad', detail: code(err) });
    });
  });
}

/**
 * Calls /runtime.v1.RuntimeService/Version on the CRI socket (empty request). A bare connect is not
 * enough: the kernel accepts connections into the listen backlog even when containerd is hung. Any
 * grpc-status (even UNIMPLEMENTED) means the server answered.
 */
export function probeContainerd(root: string, socket: string, timeoutMs: number, signal?: AbortSignal): Promise<ProbeResult> {
  const path = hostPath(root, socket);
  if (!exists(root, socket)) return Promise.resolve({ kind: 'absent', detail: `${socket} does not exist` });
  return new Promise((resolve) => {
    let done = false;
    let sockErr: unknown;
    let sock: net.Socket | undefined;
    const connect = () => (sock = net.connect(path).on('error', (err) => (sockErr = err)));
    const session = http2.connect('http://localhost', { createConnection: connect });
    /** The socket's own error says more than the stream cancellation it causes. */
    const why = (err: unknown) => {
      const c = code(sockErr ?? err);
      if (c === 'ECONNREFUSED') return 'connection refused (stale socket)';
      // A unix socket refuses new connections at once when its listen backlog is full.
      return c === 'EAGAIN' ? 'listen backlog full: containerd is not accepting connections' : c;
    };
    const finish = (r: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      session.destroy();
      // Closed here too, not only through the session: a probe every interval against a hung
      // containerd must never leave a descriptor behind (test: host-runtime, descriptors).
      sock?.destroy();
      resolve(r);
    };
    const onAbort = () => finish({ kind: 'bad', detail: 'aborted' });
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => finish({ kind: 'bad', detail: `no answer within ${timeoutMs}ms` }), timeoutMs);
    session.on('error', (err) => finish({ kind: 'bad', detail: why(err) }));
    const req = session.request({
      ':method': 'POST',
      ':path': '/runtime.v1.RuntimeService/Version',
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    let status: string | undefined;
    const take = (h: http2.IncomingHttpHeaders) => {
      const s = h['grpc-status'];
      if (typeof s === 'string') status = s;
    };
    req.on('response', take);
    req.on('trailers', take);
    req.on('data', () => undefined);
    req.on('end', () => finish(status !== undefined ? { kind: 'ok' } : { kind: 'bad', detail: 'answer without grpc-status' }));
    req.on('error', (err) => finish({ kind: 'bad', detail: why(err) }));
    req.end(Buffer.alloc(5)); // gRPC frame: uncompressed, zero-length VersionRequest
  });
}

/** systemd is PID 1 on the host when /run/systemd/system exists (sd_booted(3)). */
export function hasSystemd(root: string): boolean {
  return exists(root, '/run/systemd/system');
}

/**
 * One `systemctl show` for all units. Under a host root, systemctl reaches the host's systemd over
 * the host's D-Bus socket (as root it first tries /run/systemd/private, absent in the container).
 */
export async function readUnits(
  exec: ExecFn,
  systemctl: string,
  root: string,
  units: string[],
  timeoutMs: number,
  signal: AbortSignal,
): Promise<UnitState[]> {
  const env =
    root === '/' ? process.env : { ...process.env, DBUS_SYSTEM_BUS_ADDRESS: `unix:path=${hostPath(root, '/run/dbus/system_bus_socket')}` };
  const r = await exec(systemctl, ['show', '-p', 'Id,LoadState,ActiveState,SubState,NRestarts', '--', ...units], {
    timeoutMs,
    maxBytes: 64 * 1024,
    signal,
    env,
  });
  if (r.timedOut) throw new VigilError('VIGIL_E_SYSTEMCTL', `systemctl show timed out after ${timeoutMs}ms`);
  if (r.code !== 0) throw new VigilError('VIGIL_E_SYSTEMCTL', `systemctl show exited ${r.code}: ${r.stderr.trim().slice(0, 200)}`);
  return parseSystemctlShow(r.stdout);
}
