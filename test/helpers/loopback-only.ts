/**
 * A safety net for tests that hand code under test public-looking addresses (TEST-NET answers from
 * an injected resolver): from the moment this module is imported, any TCP connection this process
 * would open to an address outside loopback fails with EACCES before a packet is sent. So a
 * regression that bypasses an injected connector shows up as a failed test, never as traffic.
 */
import dns from 'node:dns';
import net from 'node:net';

function isLoopback(address: string): boolean {
  return address.startsWith('127.') || address === '::1' || address.startsWith('::ffff:127.');
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;
type Lookup = (host: string, options: dns.LookupOptions, cb: LookupCallback) => void;

function refusal(address: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`test guard: a connection to ${address} (outside loopback) was refused before sending`), {
    code: 'EACCES',
  });
}

/** Wraps a lookup so that any non-loopback answer becomes an error. */
function guarded(lookup: Lookup): Lookup {
  return (host, options, cb) =>
    lookup(host, options, (err, address, family) => {
      if (err) return cb(err, address, family);
      const all = Array.isArray(address) ? address.map((a) => a.address) : [address];
      const outside = all.find((a) => !isLoopback(a));
      if (outside) return cb(refusal(outside), address, family);
      cb(null, address, family);
    });
}

// eslint-disable-next-line @typescript-eslint/unbound-method -- re-applied with the socket as `this` below
const original = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
  // net.connect() and http's agent pass one array ([options, callback]) marked as normalized.
  const normalized = Array.isArray(args[0]) ? (args[0] as unknown[]) : args;
  const first = normalized[0];
  let host: string | undefined;
  if (first && typeof first === 'object' && !('path' in first && (first as { path?: unknown }).path)) {
    const o = first as net.TcpSocketConnectOpts;
    host = o.host ?? 'localhost';
    if (!net.isIP(host)) normalized[0] = { ...o, lookup: guarded(o.lookup ?? dns.lookup) };
  } else if (typeof first === 'number' || typeof first === 'string') {
    host = typeof normalized[1] === 'string' ? normalized[1] : 'localhost';
  }
  if (host !== undefined && net.isIP(host) && !isLoopback(host)) {
    const refused = refusal(host);
    process.nextTick(() => this.destroy(refused));
    return this;
  }
  return (original as (...a: unknown[]) => net.Socket).apply(this, args);
};
