/** The whole configuration: Vigil's core options plus each monitor's own section. */
import { coreConfig } from './schema.ts';
import { gpuConfigSchema } from '../monitors/gpu/config.ts';
import { hostMonitorsConfigSchema } from '../monitors/host-config.ts';

export const configSchema = coreConfig.extend({
  /** The NVIDIA GPU monitor (NVML). */
  gpu: gpuConfigSchema.omit({ fatalXids: true }).strict().prefault({}),
  /** The polled host checks: kernel, networking, storage, container runtime. */
  monitors: hostMonitorsConfigSchema,
});
