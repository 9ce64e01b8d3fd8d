/** `vigil catalog`: the reason catalog, for people or scripts. */
import { REASONS } from '../catalog/index.ts';
import { formatDuration } from '../util/duration.ts';
import type { Recovery } from '../api/types.ts';

function recoveryText(r: Recovery): string {
  if (r.kind === 'untilReboot') return 'untilReboot';
  if (r.kind === 'whenHealthy') return `whenHealthy(${r.healthyChecks})`;
  return `ttl(${formatDuration(r.ttlMs)})`;
}

export function runCatalogCommand(opts: { json?: boolean }): number {
  if (opts.json) {
    process.stdout.write(JSON.stringify(REASONS, null, 2) + '\n');
    return 0;
  }
  const rows = REASONS.map((r) => [r.name, r.condition, r.severity, recoveryText(r.recovery), r.action]);
  const widths = [0, 1, 2, 3].map((i) => Math.max(...rows.map((row) => row[i].length), 8));
  for (const row of [['REASON', 'CONDITION', 'SEVERITY', 'RECOVERY', 'ACTION'], ...rows]) {
    process.stdout.write(row.map((cell, i) => (i < 4 ? cell.padEnd(widths[i]) : cell)).join('  ') + '\n');
  }
  return 0;
}
