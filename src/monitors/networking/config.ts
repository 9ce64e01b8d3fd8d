/** The networking checks' section (`monitors.networking`). Every field has a default. */
import * as z from 'zod';
import { checkTiming, MINUTE, ratio } from '../../config/check-timing.ts';
import { positiveDuration } from '../../config/duration.ts';
import { regexList } from '../../config/regex.ts';
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

export type NetworkingConfig = z.output<typeof networkingConfigSchema>;
