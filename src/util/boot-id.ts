import { readFileSync } from 'node:fs';
import { errorMessage, VigilError } from './errors.ts';

export const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

/**
 * The kernel's boot id: a new one means the node rebooted, which clears untilReboot reasons and
 * decides where the kernel log is read from. Throws when it cannot be read: a made-up id would
 * make every start look like a reboot (or none of them), so the agent refuses to start instead.
 */
export function readBootId(file = BOOT_ID_FILE): string {
  let id: string;
  try {
    id = readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new VigilError(
      'VIGIL_E_BOOT_ID',
      `cannot read the boot id from ${file} (${errorMessage(err)}); Vigil needs it to tell a reboot from a restart`,
      {
        cause: err,
      },
    );
  }
  if (!id) throw new VigilError('VIGIL_E_BOOT_ID', `the boot id in ${file} is empty; Vigil needs it to tell a reboot from a restart`);
  return id;
}
