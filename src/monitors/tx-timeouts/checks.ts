/**
 * Transmit timeouts from the kernel's own counters: /sys/class/net/<if>/queues/tx-<n>/tx_timeout
 * counts each time the netdev watchdog found that queue stuck and had the driver reset it. The kernel
 * log says the same ("NETDEV WATCHDOG ... transmit queue N timed out") but a ring overrun or a
 * rate-limited printk can lose the line; the counter cannot. Growth since the last poll raises
 * NetworkTxTimeout on the interface, the entity the kernel-log rule uses, so both are one problem.
 */
import { finding } from '../host-finding.ts';
import type { CheckReport } from '../host-check.ts';

/** One interface's transmit queues: queue name (tx-0) → timeouts counted since boot. */
export interface TxQueueSample {
  iface: string;
  queues: Map<string, number>;
}

/** Findings for interfaces whose counters grew since `prev`; updates `prev` (the first poll only sets it). */
export function checkTxTimeouts(samples: readonly TxQueueSample[], prev: Map<string, Map<string, number>>, at: number): CheckReport {
  const report: CheckReport = { findings: [], healthy: [] };
  const seen = new Set<string>();
  for (const s of samples) {
    seen.add(s.iface);
    const before = prev.get(s.iface);
    prev.set(s.iface, s.queues);
    if (!before) continue;
    let grown = 0;
    const stuck: string[] = [];
    for (const [queue, count] of s.queues) {
      const was = before.get(queue);
      // A counter that went down was reset (driver reloaded, queues re-created): a new baseline.
      if (was === undefined || count <= was) continue;
      grown += count - was;
      stuck.push(queue);
    }
    // No healthy signal when quiet: the reason recovers by its ttl (catalog), as from the kernel log.
    if (grown === 0) continue;
    report.findings.push(
      finding(
        'NetworkTxTimeout',
        'sysfs',
        `netif:${s.iface}`,
        `${s.iface}: ${grown} transmit timeouts since the last poll (${stuck.join(', ')}); the driver reset the queue each time`,
        at,
        { interface: s.iface, timeouts: grown, queues: stuck.join(',') },
      ),
    );
  }
  for (const iface of prev.keys()) if (!seen.has(iface)) prev.delete(iface);
  return report;
}
