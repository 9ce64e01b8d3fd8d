/**
 * One writer of the kernel-log storm (bench/compare.ts starts several): `<6>` noise records to the
 * real /dev/kmsg at `rate` per second for `seconds`, paced in 10 ms slices, reopening the device
 * every 10 records unless printk_devkmsg is `on` (user writes are rate-limited per open file). Writer 0 writes the
 * hidden line (an Xid 79, `<4>`) once half the time has passed. Prints one JSON line:
 * {written, seconds, hiddenAt} (hiddenAt: Date.now() just before that write).
 *
 *   node --import tsx bench/peers/storm-writer.ts <index> <rate> <seconds> [hidden line]
 */
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';

const [index, rate, seconds] = process.argv.slice(2, 5).map(Number);
const hidden = process.argv[5];
const NOISE = [
  'audit: type=1400 audit(1700000000.%n:42): apparmor="STATUS" operation="profile_replace" name="snap.lxd.daemon" pid=%n',
  'IPv6: ADDRCONF(NETDEV_CHANGE): veth%n: link becomes ready',
  'cni0: port %n(veth%n) entered forwarding state',
  'EXT4-fs (nvme0n1p%n): mounted filesystem with ordered data mode. Quota mode: none.',
  'systemd[1]: Started session-%n.scope - Session %n of User root.',
  'nvidia-uvm: Loaded the UVM driver, major device number %n.',
];

// With printk_devkmsg `on` (the bench sets it for the storm) one open file takes every write.
const reopenEvery = readFileSync('/proc/sys/kernel/printk_devkmsg', 'utf8').trim() === 'on' ? Infinity : 10;
let fd = openSync('/dev/kmsg', 'w');
let sinceOpen = 0;
let written = 0;
let hiddenAt: number | null = null;
const t0 = Date.now();
const end = t0 + seconds * 1000;
for (;;) {
  const now = Date.now();
  if (now >= end) break;
  if (hidden && hiddenAt === null && now - t0 >= (seconds * 1000) / 2) {
    hiddenAt = Date.now();
    writeSync(fd, `<4>${hidden}\n`);
    sinceOpen++;
  }
  const due = Math.min(Math.floor(((now - t0) / 1000) * rate), rate * seconds) - written;
  // At most 10 ms of records at once, so a writer that fell behind does not run past the end.
  for (let i = 0; i < Math.min(due, Math.ceil(rate / 100)); i++) {
    if (sinceOpen >= reopenEvery) {
      closeSync(fd);
      fd = openSync('/dev/kmsg', 'w');
      sinceOpen = 0;
    }
    writeSync(fd, `<6>${NOISE[written % NOISE.length].replaceAll('%n', String(index * 1_000_000 + written))}\n`);
    sinceOpen++;
    written++;
  }
  if (due <= 0) await new Promise((r) => setTimeout(r, 10));
}
closeSync(fd);
process.stdout.write(JSON.stringify({ written, seconds: (Date.now() - t0) / 1000, hiddenAt }) + '\n');
