/** Networking checks: samples in, findings and healthy entities out. No I/O. */
import { finding, pct } from '../host-finding.ts';
import type { CheckReport, Consecutive } from '../host-check.ts';
import { ENA_COUNTERS, type EnaCounter, type NetworkingConfig } from './config.ts';
import type { LineTest } from '../../config/regex.ts';

// <linux/if.h>
export const IFF_UP = 0x1;
export const IFF_BROADCAST = 0x2;
export const IFF_LOOPBACK = 0x8;
export const IFF_MULTICAST = 0x1000;

export interface LinkSample {
  name: string;
  flags: number;
  operstate?: string;
  /** 1 carrier, 0 none; undefined when unreadable (the kernel refuses it while the link is down). */
  carrier?: number;
  /** Driver name from device/driver; undefined for virtual interfaces. */
  driver?: string;
}

const IF_REASONS = ['InterfaceNotUp', 'InterfaceNotRunning'] as const;

export function checkInterfaces(links: LinkSample[], streak: Consecutive, excluded: readonly LineTest[], at: number): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  if (links.some((l) => l.flags & IFF_LOOPBACK)) {
    r.healthy.push({ reasons: ['MissingLoopbackInterface'], entity: '', source: 'sysfs' });
  } else {
    r.findings.push(finding('MissingLoopbackInterface', 'sysfs', '', 'no loopback interface exists', at));
  }
  const seen = new Set<string>();
  for (const l of links) {
    const entity = `netif:${l.name}`;
    const loop = (l.flags & IFF_LOOPBACK) !== 0;
    if (excluded.some((re) => re.test(l.name))) continue;
    // As EKS: point-to-point and tunnel devices without broadcast/multicast are not judged.
    if (!loop && !(l.flags & (IFF_BROADCAST | IFF_MULTICAST))) continue;
    let bad: (typeof IF_REASONS)[number] | undefined;
    let why = '';
    if (!(l.flags & IFF_UP)) {
      // Administratively down is the operator's choice, except for loopback, which must be up.
      if (loop) [bad, why] = ['InterfaceNotUp', 'loopback is administratively down'];
    } else if (l.carrier === 0) {
      [bad, why] = ['InterfaceNotUp', 'is administratively up but has no carrier'];
    } else if (l.operstate !== undefined && l.operstate !== 'up' && l.operstate !== 'unknown') {
      // sysfs `flags` never carries IFF_RUNNING (the kernel derives it from operstate for ioctls).
      [bad, why] = ['InterfaceNotRunning', `is up but not running (operstate ${l.operstate ?? '?'})`];
    }
    const good = IF_REASONS.filter((x) => x !== bad);
    for (const g of good) streak.good(`${l.name}\0${g}`);
    r.healthy.push({ reasons: good, entity, source: 'sysfs' });
    if (!bad) continue;
    const key = `${l.name}\0${bad}`;
    seen.add(key);
    if (streak.bad(key)) {
      r.findings.push(
        finding(bad, 'sysfs', entity, `interface ${l.name} ${why}`, at, {
          flags: `0x${l.flags.toString(16)}`,
          operstate: l.operstate ?? '',
        }),
      );
    }
  }
  streak.retain(seen);
  return r;
}

export interface SysctlSample {
  ipForward?: number;
  conntrackCount?: number;
  conntrackMax?: number;
}

export function checkSysctl(s: SysctlSample, cfg: NetworkingConfig, at: number): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  if (cfg.requireIpForward && s.ipForward !== undefined) {
    if (s.ipForward !== 1) r.findings.push(finding('NetworkSysctl', 'procfs', '', `net.ipv4.ip_forward is ${s.ipForward}, expected 1`, at));
    else r.healthy.push({ reasons: ['NetworkSysctl'], entity: '', source: 'procfs' });
  }
  // Without the nf_conntrack module the files do not exist: nothing to fill.
  if (s.conntrackCount !== undefined && s.conntrackMax !== undefined && s.conntrackMax > 0) {
    const used = s.conntrackCount / s.conntrackMax;
    if (used >= cfg.conntrackRatio) {
      r.findings.push(
        finding('ConntrackExceeded', 'procfs', '', `conntrack table ${pct(used)} full (${s.conntrackCount}/${s.conntrackMax})`, at, {
          count: s.conntrackCount,
          max: s.conntrackMax,
        }),
      );
    } else r.healthy.push({ reasons: ['ConntrackExceeded'], entity: '', source: 'procfs' });
  }
  if (r.findings.length === 0 && r.healthy.length === 0) r.status = 'skipped';
  return r;
}

/** `ethtool -S` output → counter map. */
export function parseEthtoolStats(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^\s*([\w.[\]-]+):\s*(\d+)\s*$/gm)) out[m[1]] = Number(m[2]);
  return out;
}

/** Token bucket per ENA counter, as in the EKS agent: bursts are tolerated, sustained growth is not. */
export class EnaBuckets {
  private readonly tokens = new Map<string, number>();
  take(key: string, burst: number, refill: number, used: number): boolean {
    const t = Math.min(burst, (this.tokens.get(key) ?? burst) + refill) - used;
    this.tokens.set(key, Math.max(0, t));
    return t >= 0;
  }
}

export function checkEna(
  iface: string,
  prev: Record<string, number> | undefined,
  cur: Record<string, number>,
  buckets: EnaBuckets,
  elapsedMs: number,
  cfg: NetworkingConfig,
  at: number,
): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  if (!prev) return r; // first sample: baseline only
  const entity = `netif:${iface}`;
  const refill = elapsedMs / cfg.ena.refillEvery;
  for (const [counter, reason] of Object.entries(ENA_COUNTERS) as [EnaCounter, (typeof ENA_COUNTERS)[EnaCounter]][]) {
    const a = prev[counter];
    const b = cur[counter];
    if (a === undefined || b === undefined) continue;
    const delta = b >= a ? b - a : 0; // a driver reset restarts counters
    if (buckets.take(`${iface}\0${counter}`, cfg.ena.burst[counter], refill, delta)) {
      r.healthy.push({ reasons: [reason], entity, source: 'exec' });
    } else {
      r.findings.push(
        finding(reason, 'exec', entity, `${iface}: ${counter} grew by ${delta} since the last poll`, at, { counter, delta, total: b }),
      );
    }
  }
  return r;
}

export interface RdmaPortSample {
  /** `<device>/<port>`, e.g. mlx5_0/1. */
  port: string;
  /** Text after `N: ` in ports/N/state, e.g. ACTIVE, DOWN. */
  state?: string;
  /** Text after `N: ` in ports/N/phys_state, e.g. LinkUp, Polling. */
  physState?: string;
  counters: Record<string, number>;
}

export function checkRdma(
  ports: RdmaPortSample[],
  prev: Map<string, Record<string, number>>,
  streak: Consecutive,
  cfg: NetworkingConfig,
  at: number,
): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  const seen = new Set<string>();
  for (const p of ports) {
    const entity = `netif:${p.port}`;
    const down = (p.state !== undefined && p.state !== 'ACTIVE') || (p.physState !== undefined && p.physState !== 'LinkUp');
    if (down) {
      seen.add(p.port);
      if (streak.bad(p.port)) {
        r.findings.push(
          finding('RDMAPortDown', 'sysfs', entity, `RDMA port ${p.port} is ${p.state ?? '?'} / ${p.physState ?? '?'}`, at, {
            state: p.state ?? '',
            physState: p.physState ?? '',
          }),
        );
      }
    } else {
      streak.good(p.port);
      r.healthy.push({ reasons: ['RDMAPortDown'], entity, source: 'sysfs' });
    }
    const before = prev.get(p.port);
    prev.set(p.port, p.counters);
    if (!before) continue;
    const grew: string[] = [];
    for (const [name, limit] of Object.entries(cfg.rdma.errorCounters)) {
      const a = before[name];
      const b = p.counters[name];
      if (a !== undefined && b !== undefined && b - a >= limit) grew.push(`${name} +${b - a}`);
    }
    if (grew.length > 0) {
      r.findings.push(
        finding('RDMAPortErrors', 'sysfs', entity, `RDMA port ${p.port} error counters grew: ${grew.join(', ')}`, at, {
          counters: grew.join(','),
        }),
      );
    } else r.healthy.push({ reasons: ['RDMAPortErrors'], entity, source: 'sysfs' });
  }
  streak.retain(seen);
  for (const k of prev.keys()) if (!ports.some((p) => p.port === k)) prev.delete(k);
  return r;
}

export function checkDns(host: string, error: string | undefined, at: number): CheckReport {
  if (error === undefined) return { findings: [], healthy: [{ reasons: ['DNSResolutionFailed'], entity: '', source: 'exec' }] };
  return {
    findings: [finding('DNSResolutionFailed', 'exec', '', `cannot resolve the API server name ${host}: ${error}`, at, { host })],
    healthy: [],
  };
}
