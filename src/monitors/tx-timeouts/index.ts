/** Transmit-queue timeouts counted by the kernel (sysfs), polled: a small monitor, one module. */
import { listDir, readNumber } from '../../sources/host/read.ts';
import { UserRegex } from '../../config/regex.ts';
import { settle } from '../host-check.ts';
import { polledMonitor } from '../module.ts';
import { checkTxTimeouts, type TxQueueSample } from './checks.ts';
import { txTimeoutsConfigSchema } from './config.ts';

export { checkTxTimeouts, type TxQueueSample } from './checks.ts';
export { txTimeoutsConfigSchema, type TxTimeoutsConfig } from './config.ts';

/** Every interface with transmit queues that expose the counter (Linux >= 4.x; absent: skipped). */
export function readTxQueues(root: string, excluded: readonly UserRegex[]): TxQueueSample[] {
  const out: TxQueueSample[] = [];
  for (const iface of listDir(root, '/sys/class/net')) {
    if (excluded.some((re) => re.test(iface))) continue;
    const queues = new Map<string, number>();
    for (const q of listDir(root, `/sys/class/net/${iface}/queues`)) {
      if (!q.startsWith('tx-')) continue;
      const n = readNumber(root, `/sys/class/net/${iface}/queues/${q}/tx_timeout`);
      if (n !== undefined) queues.set(q, n);
    }
    if (queues.size > 0) out.push({ iface, queues });
  }
  return out;
}

export const txTimeoutsMonitor = polledMonitor({
  name: 'txTimeouts',
  schema: txTimeoutsConfigSchema,
  condition: 'NetworkingReady',
  unknownReason: 'NetworkingChecksUnavailable',
  create: (cfg) => {
    if (!cfg.checks.queues.enabled) return [];
    const excluded = cfg.excludedInterfaces.map((s) => UserRegex.compile(s));
    const prev = new Map<string, Map<string, number>>();
    return [
      {
        name: 'txTimeouts.queues',
        ...cfg.checks.queues,
        run: (ctx) =>
          settle(() => {
            const samples = readTxQueues(ctx.root, excluded);
            return samples.length === 0 ? { findings: [], healthy: [], status: 'skipped' } : checkTxTimeouts(samples, prev, ctx.now);
          }),
      },
    ];
  },
});
