/**
 * The polled host checks (key `monitors`): kernel, networking, storage and container runtime.
 * Every field has a default, so `hostMonitorsConfigSchema.parse({})` is a complete config.
 * Durations: ms or '30s'/'5m'.
 */
import * as z from 'zod';
import { duration, positiveDuration } from './duration.ts';
import { regexList } from './regex.ts';

export const MINUTE = 60_000;

/** A fraction in [0, 1] (usage ratios). */
const ratio = (d: number) => z.number().min(0).max(1).default(d);

/** Scheduling of one check: `{enabled, interval, budget}`. */
function checkTiming(intervalMs: number, budgetMs = 10_000) {
  return z
    .strictObject({ enabled: z.boolean().default(true), interval: positiveDuration(intervalMs), budget: positiveDuration(budgetMs) })
    .prefault({})
    .refine((t) => t.budget <= t.interval, { message: 'need budget <= interval' })
    .transform((t) => ({ enabled: t.enabled, intervalMs: t.interval, budgetMs: t.budget }));
}

export const kernelConfigSchema = z
  .strictObject({
    enabled: z.boolean().default(true),
    checks: z
      .strictObject({
        /** PID and open-file headroom (two small procfs reads). */
        limits: checkTiming(5 * MINUTE),
        /** Zombie count (one pass over /proc/<pid>/stat). */
        zombies: checkTiming(5 * MINUTE),
        /** adjtimex(2) STA_UNSYNC. */
        clock: checkTiming(5 * MINUTE),
        /** WARNING splats per window. */
        warnings: checkTiming(5 * MINUTE),
      })
      .prefault({}),
    /** Threads ÷ min(kernel.pid_max, kernel.threads-max) at or above this → ApproachingKernelPidMax (EKS: 0.7). */
    pidUsageRatio: ratio(0.7),
    /** Allocated ÷ fs.file-max at or above this → ApproachingMaxOpenFiles (EKS: 0.7). */
    openFilesRatio: ratio(0.7),
    /** Zombies at or above this count... (EKS: 20) */
    zombieCount: z.number().int().min(1).default(20),
    /** ...in this many consecutive polls → ExcessiveZombieProcesses (EKS needs 5 occurrences). */
    zombieConsecutivePolls: z.number().int().min(1).default(2),
    /** Kernel WARNINGs within one window at or above this → RepeatedKernelWarnings. */
    warningsPerWindow: z.number().int().min(1).default(3),
  })
  .prefault({});

/** ENA allowance counters (ethtool -S names) → reason; `ena.burst` has one entry per counter. */
export const ENA_COUNTERS = {
  bw_in_allowance_exceeded: 'BandwidthInExceeded',
  bw_out_allowance_exceeded: 'BandwidthOutExceeded',
  pps_allowance_exceeded: 'PPSExceeded',
  conntrack_allowance_exceeded: 'ConntrackExceeded',
  linklocal_allowance_exceeded: 'LinkLocalExceeded',
} as const;
export type EnaCounter = keyof typeof ENA_COUNTERS;

export const networkingConfigSchema = z
  .strictObject({
    enabled: z.boolean().default(true),
    checks: z
      .strictObject({
        /** Reading flags/carrier/operstate takes under 1 ms, so it can poll faster than EKS's 5 min (their #249: 5–10 min latency). */
        interfaces: checkTiming(5 * MINUTE),
        sysctl: checkTiming(5 * MINUTE),
        ena: checkTiming(5 * MINUTE, 15_000),
        rdma: checkTiming(5 * MINUTE),
        dns: checkTiming(5 * MINUTE),
      })
      .prefault({}),
    /** Interfaces whose name matches are not checked (virtual, tunnels, pod veths, InfiniBand; EKS's list plus CNI names). */
    excludedInterfaces: regexList([
      '^(gre|gretap|erspan|ip6gre|ip6gretap|tunl|sit|ip6tnl)\\d*$',
      '^ib\\d+',
      '^ibp\\d+s\\d+(f\\d+)?',
      '^(docker|veth|cali|lxc|cilium|flannel|vxlan|genev|ifb|kube-ipvs|nodelocaldns|dummy|ovs-system)',
      // Pod bridges have no carrier while no pod is attached.
      '^(cni|cbr|kube-bridge|virbr|br-)',
      '^eni[0-9a-f]{11}',
    ]),
    /** A bad interface or RDMA port is reported once seen in this many consecutive polls. */
    consecutivePolls: z.number().int().min(1).default(2),
    /** net.ipv4.ip_forward must be 1 (pod networking). */
    requireIpForward: z.boolean().default(true),
    /** nf_conntrack_count ÷ nf_conntrack_max at or above this → ConntrackExceeded. */
    conntrackRatio: ratio(0.9),
    ena: z
      .strictObject({
        ethtool: z.string().min(1).default('ethtool'),
        timeout: positiveDuration(5_000),
        /** Token bucket per counter (EKS): `burst` increments tolerated, refilled one per `refillEvery`. */
        refillEvery: positiveDuration(10 * MINUTE),
        burst: z
          .strictObject({
            bw_in_allowance_exceeded: z.number().int().min(0).default(180),
            bw_out_allowance_exceeded: z.number().int().min(0).default(100),
            conntrack_allowance_exceeded: z.number().int().min(0).default(100),
            linklocal_allowance_exceeded: z.number().int().min(0).default(100),
            pps_allowance_exceeded: z.number().int().min(0).default(320),
          } satisfies Record<EnaCounter, unknown>)
          .prefault({}),
      })
      .prefault({}),
    rdma: z
      .strictObject({
        /** `<device>/<port>` names (e.g. `mlx5_0/1`) matching these are not checked (uncabled ports). */
        excludedPorts: regexList([]),
        /** Error counters (ports/N/counters/<name>) and the growth per poll that is reported. */
        errorCounters: z.record(z.string(), z.number().int().min(1)).default({
          symbol_error: 10,
          link_error_recovery: 1,
          link_downed: 1,
          port_rcv_errors: 10,
          port_rcv_remote_physical_errors: 10,
          local_link_integrity_errors: 1,
          excessive_buffer_overrun_errors: 1,
        }),
      })
      .prefault({}),
    dns: z
      .strictObject({
        /** Name to resolve; default: KUBERNETES_SERVICE_HOST when it is a name, else the kubelet kubeconfig's server. */
        host: z.string().min(1).optional(),
        kubeconfigPaths: z.array(z.string()).default(['/var/lib/kubelet/kubeconfig', '/etc/kubernetes/kubelet.conf']),
        timeout: positiveDuration(2_000),
        /** Attempts per poll before reporting (a single lost UDP packet is not a fault). */
        attempts: z.number().int().min(1).max(5).default(2),
      })
      .prefault({}),
  })
  .prefault({});

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

export const runtimeConfigSchema = z
  .strictObject({
    enabled: z.boolean().default(true),
    checks: z
      .strictObject({
        /** kubelet /healthz: one local HTTP request. */
        kubelet: checkTiming(5 * MINUTE),
        /** containerd CRI socket: one local gRPC call. */
        containerd: checkTiming(5 * MINUTE),
        /** systemd units: one `systemctl show` for all units. */
        units: checkTiming(5 * MINUTE),
      })
      .prefault({}),
    kubelet: z
      .strictObject({
        healthzUrl: z.url().default('http://127.0.0.1:10248/healthz'),
        timeout: positiveDuration(2_000),
        /** When false, nothing listening means "no kubelet here" (skip); when true it is KubeletUnhealthy. */
        required: z.boolean().default(false),
      })
      .prefault({}),
    containerd: z
      .strictObject({
        /** Host path of the CRI socket. */
        socket: z.string().min(1).default('/run/containerd/containerd.sock'),
        timeout: positiveDuration(2_000),
        /** When false, a missing socket means "no containerd here" (skip). */
        required: z.boolean().default(false),
      })
      .prefault({}),
    units: z
      .strictObject({
        names: z
          .array(z.string())
          .default(['kubelet.service', 'containerd.service', 'nvidia-persistenced.service', 'nvidia-fabricmanager.service']),
        /** NRestarts above this and grown since the last poll → <Unit>RepeatedRestart (EKS: 3). */
        restartThreshold: z.number().int().min(0).default(3),
        systemctl: z.string().min(1).default('systemctl'),
        timeout: positiveDuration(5_000),
      })
      .prefault({}),
  })
  .prefault({});

export const schedulerConfigSchema = z
  .strictObject({
    /** First runs are spread over [0, startupJitter) (capped by each check's interval). */
    startupJitter: duration(60_000),
    /** Every later run lands at interval ± jitter·interval. */
    jitter: z.number().min(0).max(0.5).default(0.1),
  })
  .prefault({});

export const hostMonitorsConfigSchema = z
  .strictObject({
    /** Where the host's / is mounted in the agent's container ('/' when run on the host). */
    hostRoot: z.string().startsWith('/').default('/'),
    scheduler: schedulerConfigSchema,
    kernel: kernelConfigSchema,
    networking: networkingConfigSchema,
    storage: storageConfigSchema,
    runtime: runtimeConfigSchema,
  })
  .prefault({});

export type KernelConfig = z.output<typeof kernelConfigSchema>;
export type NetworkingConfig = z.output<typeof networkingConfigSchema>;
export type StorageConfig = z.output<typeof storageConfigSchema>;
export type RuntimeConfig = z.output<typeof runtimeConfigSchema>;
export type HostMonitorsConfig = z.output<typeof hostMonitorsConfigSchema>;
export type HostMonitorsConfigInput = z.input<typeof hostMonitorsConfigSchema>;
