/** storage: mounts (the host's mount namespace), free space, block devices and I/O counters. */
import { listDir, readFileSmall } from '../../sources/host/index.ts';
import { commandCollector, filesCollector, readFiles } from './common.ts';
import type { Collector, CollectorContext } from './types.ts';

const BLOCK_ATTRS = ['size', 'ro', 'removable', 'queue/rotational', 'device/model', 'device/state'];

/** `lsblk` without lsblk: each block device's sysfs attributes (size in 512-byte sectors). */
function blockFromSys(ctx: CollectorContext): string {
  const out: string[] = [];
  for (const dev of listDir(ctx.capture.hostRoot, '/sys/block').sort()) {
    const attrs = BLOCK_ATTRS.map((a) => `${a}=${readFileSmall(ctx.host(`/sys/block/${dev}/${a}`))?.trim() ?? '?'}`);
    out.push(`${dev}: ${attrs.join(' ')}`);
  }
  return `${out.join('\n')}\n\n${readFiles(ctx, ['/proc/partitions']).text}`;
}

export function storageCollectors(): Collector[] {
  return [
    // PID 1's mountinfo is the host's mount namespace when the host's /proc is visible; else our own.
    {
      name: 'storage/mounts',
      category: 'storage',
      file: 'storage/mountinfo.txt',
      run: (ctx) => {
        const text = readFileSmall(ctx.host('/proc/1/mountinfo')) ?? readFileSmall(ctx.host('/proc/self/mountinfo'));
        return Promise.resolve(text === undefined ? { error: 'cannot read /proc/1/mountinfo or /proc/self/mountinfo' } : { data: text });
      },
    },
    // -P: one line per file system; a hung network mount is cut by the timeout with the rest kept.
    commandCollector('storage/df', 'storage', 'storage/df.txt', [
      ['df', '-P', '-T', '-a'],
      ['df', '-P', '-i'],
    ]),
    commandCollector(
      'storage/block-devices',
      'storage',
      'storage/block-devices.txt',
      [['lsblk', '-a', '-o', 'NAME,KNAME,MAJ:MIN,TYPE,SIZE,RO,RM,ROTA,FSTYPE,MOUNTPOINT,MODEL,SERIAL,STATE']],
      blockFromSys,
    ),
    filesCollector('storage/diskstats', 'storage', 'storage/diskstats.txt', ['/proc/diskstats', '/proc/partitions', '/proc/mdstat']),
  ];
}
