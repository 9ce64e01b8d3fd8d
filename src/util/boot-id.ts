import { readFileSync } from 'node:fs';

/** The kernel's boot id: a new one means the node rebooted, which clears untilReboot reasons. */
export function readBootId(file = '/proc/sys/kernel/random/boot_id'): string {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return 'unknown-boot';
  }
}
