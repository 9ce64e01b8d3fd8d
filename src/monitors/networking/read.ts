/** Networking samples: sysfs/procfs reads; `ethtool -S` only for ENA interfaces; one DNS lookup. */
import dns from 'node:dns';
import net from 'node:net';
import { listDir, readFileSmall, readLinkBase, readNumber, readSysFile, readSysFileAsync } from '../../sources/host/read.ts';
import { hostPath } from '../../sources/host/paths.ts';
import type { ExecFn } from '../../sources/host/exec.ts';
import { errorCode, errorMessage } from '../../util/errors.ts';
import { IFF_UP, parseEthtoolStats, type LinkSample, type RdmaPortSample, type SysctlSample } from './checks.ts';
import type { LineTest } from '../../config/regex.ts';

export function readLinks(root: string): LinkSample[] {
  const links: LinkSample[] = [];
  for (const name of listDir(root, '/sys/class/net')) {
    const dir = `/sys/class/net/${name}`;
    const flagsText = readSysFile(root, `${dir}/flags`);
    if (flagsText === undefined) continue; // bonding_masters and other plain files
    const l: LinkSample = { name, flags: parseInt(flagsText.trim(), 16) || 0 };
    const oper = readSysFile(root, `${dir}/operstate`)?.trim();
    if (oper) l.operstate = oper;
    if (l.flags & IFF_UP) {
      const carrier = readNumber(root, `${dir}/carrier`);
      if (carrier !== undefined) l.carrier = carrier;
    }
    const driver = readLinkBase(root, `${dir}/device/driver`);
    if (driver) l.driver = driver;
    links.push(l);
  }
  return links;
}

export function readSysctl(root: string): SysctlSample {
  const s: SysctlSample = {};
  const fwd = readNumber(root, '/proc/sys/net/ipv4/ip_forward');
  if (fwd !== undefined) s.ipForward = fwd;
  const count = readNumber(root, '/proc/sys/net/netfilter/nf_conntrack_count');
  const max = readNumber(root, '/proc/sys/net/netfilter/nf_conntrack_max');
  if (count !== undefined && max !== undefined) Object.assign(s, { conntrackCount: count, conntrackMax: max });
  return s;
}

/** ENA statistics exist only through the ethtool ioctl; spawn it with a timeout and bounded output. */
export async function readEthtool(
  exec: ExecFn,
  ethtool: string,
  iface: string,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<Record<string, number> | undefined> {
  const r = await exec(ethtool, ['-S', iface], { timeoutMs, maxBytes: 256 * 1024, signal });
  if (r.code !== 0 || r.timedOut) return undefined;
  return parseEthtoolStats(r.stdout);
}

/** Text after "N: " in an InfiniBand state file ("4: ACTIVE" → ACTIVE). */
const ibState = (t: string | undefined) => t?.trim().replace(/^\d+:\s*/, '') || undefined;

/** Counters are read asynchronously: on some HCAs a read is a firmware query that can stall. */
export async function readRdmaPorts(
  root: string,
  counterNames: string[],
  excluded: readonly LineTest[],
  signal: AbortSignal,
): Promise<RdmaPortSample[]> {
  const out: RdmaPortSample[] = [];
  for (const dev of listDir(root, '/sys/class/infiniband')) {
    for (const port of listDir(root, `/sys/class/infiniband/${dev}/ports`)) {
      const id = `${dev}/${port}`;
      if (excluded.some((re) => re.test(id))) continue;
      const dir = `/sys/class/infiniband/${dev}/ports/${port}`;
      const s: RdmaPortSample = { port: id, counters: {} };
      const state = ibState(readSysFile(root, `${dir}/state`));
      if (state) s.state = state;
      const phys = ibState(readSysFile(root, `${dir}/phys_state`));
      if (phys) s.physState = phys;
      for (const c of counterNames) {
        const t = await readSysFileAsync(root, `${dir}/counters/${c}`, signal);
        const n = t === undefined ? NaN : Number(t.trim());
        if (Number.isFinite(n)) s.counters[c] = n;
      }
      out.push(s);
    }
  }
  return out;
}

/**
 * The API server's host name: config, else KUBERNETES_SERVICE_HOST when it is a name (in a pod it
 * is usually the service IP, which needs no lookup), else the server of the kubelet's kubeconfig.
 */
export function apiServerHost(
  root: string,
  configured: string | undefined,
  kubeconfigPaths: string[],
  env: NodeJS.ProcessEnv,
): string | undefined {
  if (configured) return configured;
  const svc = env.KUBERNETES_SERVICE_HOST;
  if (svc && net.isIP(svc) === 0) return svc;
  for (const p of kubeconfigPaths) {
    const m = /^\s*server:\s*["']?(https?:\/\/[^"'\s]+)/m.exec(readFileSmall(hostPath(root, p)) ?? '');
    if (!m) continue;
    try {
      const host = new URL(m[1]).hostname.replace(/^\[|\]$/g, '');
      if (net.isIP(host) === 0) return host;
    } catch {
      // not a URL: try the next file
    }
  }
  return undefined;
}

export type LookupFn = (host: string, timeoutMs: number) => Promise<string | undefined>;

/** getaddrinfo through the thread pool; it cannot be cancelled, so the timeout only stops the wait. */
export const lookupHost: LookupFn = async (host, timeoutMs) => {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      dns.promises.lookup(host),
      new Promise(
        (_, reject) => (timer = setTimeout(() => reject(Object.assign(new Error('timed out'), { code: 'ETIMEOUT' })), timeoutMs)),
      ),
    ]);
    return undefined;
  } catch (err) {
    return errorCode(err) ?? errorMessage(err);
  } finally {
    clearTimeout(timer);
  }
};
