/**
 * Config of the host monitors, composed by the agent under `monitors`. Every field has a default,
 * so `hostMonitorsConfigSchema.parse({})` is a complete config. Durations: ms or '30s'/'5m'.
 */
import { z } from 'zod';
import { duration } from './host-config-util.ts';
import { kernelConfigSchema } from './kernel/config.ts';
import { networkingConfigSchema } from './networking/config.ts';
import { runtimeConfigSchema } from './runtime/config.ts';
import { storageConfigSchema } from './storage/config.ts';

export const schedulerConfigSchema = z
  .object({
    /** First runs are spread over [0, startupJitter) (capped by each check's interval). */
    startupJitter: duration(60_000),
    /** Every later run lands at interval ± jitter·interval. */
    jitter: z.number().min(0).max(0.5).default(0.1),
  })
  .strict()
  .prefault({});

export const hostMonitorsShape = {
  /** Where the host's / is mounted in the agent's container ('/' when run on the host). */
  hostRoot: z.string().startsWith('/').default('/'),
  scheduler: schedulerConfigSchema,
  kernel: kernelConfigSchema,
  networking: networkingConfigSchema,
  storage: storageConfigSchema,
  runtime: runtimeConfigSchema,
};

export const hostMonitorsConfigSchema = z.object(hostMonitorsShape).strict().prefault({});

export type HostMonitorsConfig = z.output<typeof hostMonitorsConfigSchema>;
export type HostMonitorsConfigInput = z.input<typeof hostMonitorsConfigSchema>;
