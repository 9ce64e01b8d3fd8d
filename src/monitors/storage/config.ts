/** The storage checks' section (`monitors.storage`). Every field has a default. */
import * as z from 'zod';
import { checkTiming, MINUTE, ratio } from '../../config/check-timing.ts';
import { duration, positiveDuration } from '../../config/duration.ts';
import { regexList } from '../../config/regex.ts';
export const storageConfigSchema = z
  .strictObject({
    enabled: z.boolean().default(true),
    checks: z
      .strictObject({
        /** Read-only mounts and disk/inode usage of `paths`. */
        filesystems: checkTiming(5 * MINUTE),
        /** Per-device average I/O latency from /proc/diskstats. */
        diskstats: checkTiming(5 * MINUTE),
        /** Per-process block-I/O delay (one pass over /proc/<pid>/stat); EKS polls every 10 min. */
        iodelay: checkTiming(10 * MINUTE),
      })
      .prefault({}),
    /** Host directories that must be writable; ones that do not exist on the host are skipped. */
    paths: z.array(z.string().startsWith('/')).default(['/', '/var/lib/kubelet', '/var/lib/containerd']),
    /** Used space (as df counts it) at or above this → DiskUsageHigh. kubelet's default hard eviction is at 90 %. */
    diskUsageRatio: ratio(0.85),
    /** Used inodes at or above this → InodeUsageHigh. */
    inodeUsageRatio: ratio(0.85),
    statfsTimeout: positiveDuration(2_000),
    /** Average latency per completed I/O over one window at or above this → DiskIOLatencyHigh. */
    ioLatency: duration(500),
    /** ...when the device completed at least this many I/Os in the window (few samples say little). */
    ioLatencyMinIos: z.number().int().min(1).default(100),
    /** Block devices (names in /sys/block) not checked. */
    excludedDevices: regexList(['^(loop|ram|zram|sr|fd|nbd)\\d*$']),
    /** Block-I/O delay of one process within one window at or above this → IODelays (EKS: 10 s per 10 min). */
    ioDelay: duration(10_000),
    /** Processes (comm) not checked for I/O delay: kernel flush workers wait on I/O by design. */
    excludedProcesses: regexList(['^kworker/']),
    /** At most this many IODelays findings per poll, worst first (bounds cardinality). */
    ioDelayMaxFindings: z.number().int().min(1).default(5),
  })
  .prefault({});

export type StorageConfig = z.output<typeof storageConfigSchema>;
