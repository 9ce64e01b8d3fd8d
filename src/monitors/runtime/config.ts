import { z } from 'zod';
import { checkTiming, duration, MINUTE } from '../host-config-util.ts';

export const runtimeConfigSchema = z
  .object({
    enabled: z.boolean().default(true),
    checks: z
      .object({
        /** kubelet /healthz: one local HTTP request. */
        kubelet: checkTiming(5 * MINUTE),
        /** containerd CRI socket: one local gRPC call. */
        containerd: checkTiming(5 * MINUTE),
        /** systemd units: one `systemctl show` for all units. */
        units: checkTiming(5 * MINUTE),
      })
      .strict()
      .prefault({}),
    kubelet: z
      .object({
        healthzUrl: z.url().default('http://127.0.0.1:10248/healthz'),
        timeout: duration(2_000),
        /** When false, nothing listening means "no kubelet here" (skip); when true it is KubeletUnhealthy. */
        required: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    containerd: z
      .object({
        /** Host path of the CRI socket. */
        socket: z.string().default('/run/containerd/containerd.sock'),
        timeout: duration(2_000),
        /** When false, a missing socket means "no containerd here" (skip). */
        required: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    units: z
      .object({
        names: z
          .array(z.string())
          .default(['kubelet.service', 'containerd.service', 'nvidia-persistenced.service', 'nvidia-fabricmanager.service']),
        /** NRestarts above this and grown since the last poll → <Unit>RepeatedRestart (EKS: 3). */
        restartThreshold: z.number().int().min(0).default(3),
        systemctl: z.string().default('systemctl'),
        timeout: duration(5_000),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .prefault({});

export type RuntimeConfig = z.output<typeof runtimeConfigSchema>;
