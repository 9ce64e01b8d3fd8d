/**
 * Which Xids are fatal: one default list shared by the kernel-log rules and the NVML event path,
 * so the same fault seen both ways gets the same reason. Operators override it with `xid.fatal`.
 */
import { Counter, type Registry } from 'prom-client';
import type { Finding, FindingSink, Monitor } from '../../api/types.ts';

/** The EKS fatal Xid list without 63 (NVIDIA classes row-remap events as IGNORE; NVML judges them). */
export const DEFAULT_FATAL_XIDS: readonly number[] = [
  46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158,
];

/** Whether a finding is an Xid the operator chose not to hear about. */
export function isIgnoredXid(f: Finding, ignore: ReadonlySet<number>): boolean {
  return ignore.size > 0 && typeof f.attrs?.xid === 'number' && ignore.has(f.attrs.xid) && /^NvidiaXID\d+(Warning|Error)$/.test(f.reason);
}

/** Wraps a monitor so ignored Xids never reach the engine; each one is counted, not silently lost. */
export function withIgnoredXids(monitor: Monitor, ignore: readonly number[], registry: Registry): Monitor {
  if (ignore.length === 0) return monitor;
  const set = new Set(ignore);
  return {
    name: monitor.name,
    start: (out: FindingSink) => {
      // Looked up at start: the engine registers this counter after the monitors are built.
      const name = 'vigil_findings_suppressed_total';
      const counter =
        (registry.getSingleMetric(name) as Counter<'why'> | undefined) ??
        new Counter({ name, help: 'Findings counted but not re-emitted.', labelNames: ['why'], registers: [registry] });
      return monitor.start({
        finding: (f) => (isIgnoredXid(f, set) ? counter.inc({ why: 'ignored_xid' }) : out.finding(f)),
        healthy: (h) => out.healthy(h),
      });
    },
    stop: () => monitor.stop(),
    ...(monitor.status ? { status: () => monitor.status!() } : {}),
  };
}
