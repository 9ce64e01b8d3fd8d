/**
 * Bounds the HTTP server's open connections (issue #22 point 10). Any pod that reaches the node's
 * port could otherwise open connections until the agent runs out of file descriptors, and then
 * state saves, kernel-log reads and /healthz all fail with EMFILE.
 *
 * At the cap a new connection closes the least recently active idle one (no request in
 * progress) instead of being refused: idle connections cost an attacker nothing to hold, and
 * refusing newcomers would lock the kubelet's probe and Prometheus out until the idle timeout.
 * Only when every connection is serving a request is the newcomer closed.
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export const DEFAULT_MAX_CONNECTIONS = 512;

/** This process's soft RLIMIT_NOFILE (Node raises it to the hard limit at start); undefined when unlimited or unreadable. */
export function openFileLimit(limits?: string): number | undefined {
  let text = limits;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/self/limits', 'utf8');
    } catch {
      return undefined;
    }
  }
  const m = /^Max open files\s+(\d+)/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

/**
 * The connection cap: `wanted`, but never more than half the descriptor limit, so the other half
 * stays for the state file, the kernel log, the API server and diagnostics whatever the runtime's
 * limit is (1024 soft under some containerd versions, 1048576 under others).
 */
export function connectionCap(wanted: number, fdLimit: number | undefined): number {
  if (fdLimit === undefined) return wanted;
  return Math.max(1, Math.min(wanted, Math.floor(fdLimit / 2)));
}

export type ShedReason = 'evicted' | 'refused';

/** Applies the cap to `server`; returns the number of connections it holds now (for tests). */
export function limitConnections(server: Server, cap: number, onShed?: (reason: ShedReason) => void): () => number {
  // Insertion order is activity order: the first idle entry is the least recently active one.
  const open = new Map<Socket, number>();
  const evictIdle = (): boolean => {
    for (const [socket, busy] of open) {
      if (busy > 0) continue;
      open.delete(socket);
      socket.destroy();
      onShed?.('evicted');
      return true;
    }
    return false;
  };
  server.on('connection', (socket: Socket) => {
    if (open.size >= cap && !evictIdle()) {
      socket.destroy();
      onShed?.('refused');
      return;
    }
    open.set(socket, 0);
    socket.once('close', () => open.delete(socket));
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    const busy = open.get(socket);
    if (busy === undefined) return;
    open.delete(socket);
    open.set(socket, busy + 1);
    res.once('close', () => {
      const n = open.get(socket);
      if (n !== undefined) open.set(socket, n - 1);
    });
  });
  return () => open.size;
}
