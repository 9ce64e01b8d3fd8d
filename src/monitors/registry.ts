/**
 * Every monitor, listed once. Push monitors in the order they start (the kernel log first: a slow
 * NVML must not hold up Xids from /dev/kmsg), each under its own top-level key; polled monitors in
 * the order their checks are queued, each under `monitors.<name>`. Adding one is a folder that
 * exports a `polledMonitor({...})` or `pushMonitor({...})` (module.ts) and a line here: its config
 * section, what it builds and the condition it watches follow from this list.
 */
import * as z from 'zod';
import { schedulerConfigSchema } from '../config/scheduler.ts';
import { gpuModule } from './gpu/module.ts';
import { kernelLogModule } from './kernel-log/module.ts';
import { kernelMonitor } from './kernel/index.ts';
import { networkingMonitor } from './networking/index.ts';
import { runtimeMonitor } from './runtime/index.ts';
import { storageMonitor } from './storage/index.ts';
import { txTimeoutsMonitor } from './tx-timeouts/index.ts';

export const PUSH_MONITORS = [kernelLogModule, gpuModule] as const;

export const POLLED_MONITORS = [kernelMonitor, networkingMonitor, storageMonitor, runtimeMonitor, txTimeoutsMonitor] as const;

type Polled = (typeof POLLED_MONITORS)[number];

/** Each module's section under its name. */
const sections = Object.fromEntries(POLLED_MONITORS.map((m) => [m.name, m.schema])) as { [M in Polled as M['name']]: M['schema'] };

/** The `monitors` section: what every polled check shares (host root, the queue) and each module's own. */
export const hostMonitorsConfigSchema = z
  .strictObject({
    /** Where the host's / is mounted in the agent's container ('/' when run on the host). */
    hostRoot: z.string().startsWith('/').default('/'),
    scheduler: schedulerConfigSchema,
    ...sections,
  })
  .prefault({});

export type HostMonitorsConfig = z.output<typeof hostMonitorsConfigSchema>;
export type HostMonitorsConfigInput = z.input<typeof hostMonitorsConfigSchema>;
