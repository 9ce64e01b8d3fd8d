/** The container-runtime checks' section (`monitors.runtime`). Every field has a default. */
import * as z from 'zod';
import { checkTiming, MINUTE } from '../../config/check-timing.ts';
import { positiveDuration } from '../../config/duration.ts';
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

export type RuntimeConfig = z.output<typeof runtimeConfigSchema>;
