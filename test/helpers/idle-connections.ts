/**
 * Opens many idle TCP connections to a loopback port and holds them, never sending a byte: the
 * flood of issue #22 point 10. The sockets live in child processes (each with its own descriptor
 * table and its own loopback source address, so neither the test's RLIMIT_NOFILE nor one
 * address's ephemeral ports run out); the parent only counts.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface FloodCounts {
  /** Connections the TCP handshake completed for. */
  connected: number;
  /** Connect attempts that failed. */
  failed: number;
  /** Connections still open. */
  open: number;
  /** Connections the server closed (this side never closes one before stop()). */
  closedByServer: number;
}

export interface IdleFlood {
  /** Resolves once every attempt has connected or failed. */
  opened: Promise<FloodCounts>;
  counts(): Promise<FloodCounts>;
  stop(): Promise<void>;
}

// Plain JavaScript for the children: no TypeScript loader, so 4 children start in milliseconds.
const CHILD = `
import net from 'node:net';
const [port, host, localAddress, count, inFlight] = process.argv.slice(2);
const c = { connected: 0, failed: 0, open: 0, closedByServer: 0 };
const sockets = new Set();
let started = 0, settled = 0, stopping = false;
const next = () => {
  if (started >= Number(count)) return;
  started++;
  const s = net.connect({ port: Number(port), host, localAddress });
  let up = false;
  s.once('connect', () => { up = true; c.connected++; c.open++; sockets.add(s); settle(); });
  s.once('error', () => { if (!up) { c.failed++; settle(); } });
  s.once('close', () => { if (up) { c.open--; sockets.delete(s); if (!stopping) c.closedByServer++; } });
  s.on('data', () => {});
};
const settle = () => {
  settled++;
  if (settled === Number(count)) process.send({ opened: c });
  next();
};
for (let i = 0; i < Number(inFlight); i++) next();
process.on('message', (m) => {
  if (m === 'counts') process.send({ counts: c });
  if (m === 'stop') { stopping = true; for (const s of sockets) s.destroy(); process.disconnect(); }
});
`;

/** `total` idle connections to 127.0.0.1:port from `children` processes (sources 127.0.0.2, .3, ...). */
export function idleFlood(port: number, total: number, children = 4): IdleFlood {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-flood-'));
  const script = path.join(dir, 'child.mjs');
  writeFileSync(script, CHILD);
  const kids: ChildProcess[] = [];
  const opened: Promise<FloodCounts>[] = [];
  for (let i = 0; i < children; i++) {
    const n = Math.floor(total / children) + (i < total % children ? 1 : 0);
    const kid = fork(script, [String(port), '127.0.0.1', `127.0.0.${2 + i}`, String(n), '128'], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      execArgv: [],
    });
    kids.push(kid);
    opened.push(
      new Promise((resolve, reject) => {
        const onMessage = (m: { opened?: FloodCounts }) => {
          if (m.opened) {
            kid.off('message', onMessage);
            resolve(m.opened);
          }
        };
        kid.on('message', onMessage);
        kid.once('exit', (code) => reject(new Error(`flood child exited with ${code} before it opened its connections`)));
      }),
    );
  }
  const ask = (kid: ChildProcess) =>
    new Promise<FloodCounts>((resolve) => {
      const onMessage = (m: { counts?: FloodCounts }) => {
        if (m.counts) {
          kid.off('message', onMessage);
          resolve(m.counts);
        }
      };
      kid.on('message', onMessage);
      kid.send('counts');
    });
  return {
    opened: Promise.all(opened).then(sum),
    counts: async () => sum(await Promise.all(kids.map(ask))),
    async stop() {
      await Promise.all(
        kids.map(async (kid) => {
          if (kid.exitCode !== null || kid.signalCode !== null) return;
          const exited = once(kid, 'exit');
          if (kid.connected) kid.send('stop');
          else kid.kill();
          await exited;
        }),
      );
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Connections waiting in the accept queue of 127.0.0.1:port (rx_queue of its LISTEN line in
 * /proc/net/tcp): handshakes complete in the kernel before the server accepts, so 0 means the
 * server has taken every connection made so far.
 */
export function acceptQueue(port: number): number {
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[1] === local && f[3] === '0A') return parseInt(f[4].split(':')[1], 16);
  }
  return NaN;
}

/**
 * Connections the server side still holds on 127.0.0.1:port, as the kernel sees them (ESTABLISHED
 * or CLOSE_WAIT; the listening socket and ones the server closed are not counted). Exact at once,
 * unlike the clients' own count, which lags the server's closes on a loaded machine.
 */
export function serverHeld(port: number): number {
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  let n = 0;
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[1] === local && (f[3] === '01' || f[3] === '08')) n++;
  }
  return n;
}

function sum(all: FloodCounts[]): FloodCounts {
  const t: FloodCounts = { connected: 0, failed: 0, open: 0, closedByServer: 0 };
  for (const c of all) for (const k of Object.keys(t) as (keyof FloodCounts)[]) t[k] += c[k];
  return t;
}
