/**
 * The GPU monitor's configuration: the `gpu` section of the config (src/config/gpu.ts) plus the
 * fatal Xid list of the one Xid policy (`xid.fatal`), which the agent passes in. Every option has
 * a default, so `gpuConfigSchema.parse({})` is a working config.
 */
import type { z } from 'zod';
import { DEFAULT_FATAL_XIDS, gpuSectionSchema, xidList } from '../../config/index.ts';

export const gpuConfigSchema = gpuSectionSchema.extend({
  /** Xids reported as NvidiaXID<N>Error (Fatal); every other Xid is NvidiaXID<N>Warning. */
  fatalXids: xidList.default([...DEFAULT_FATAL_XIDS]),
});

export type GpuConfig = z.output<typeof gpuConfigSchema>;
export type GpuConfigInput = z.input<typeof gpuConfigSchema>;
export type GpuThresholds = GpuConfig['thresholds'];
