/**
 * The configuration file's schema as a whole: the core sections (src/config), each push monitor's
 * section from its module (`kernelLog`, `gpu`), and `monitors` assembled from the polled monitors of
 * the registry (src/monitors/registry.ts). docs/configuration.md describes each option.
 */
import * as z from 'zod';
import { conditionNames, diagnosticsConfig, kubernetesConfig, quarantineConfig, sourceRetryConfig } from '../config/schema.ts';
import { engineConfig } from '../config/engine.ts';
import { filePath } from '../config/file-path.ts';
import { LISTEN_FORMAT, parseListen } from '../config/listen.ts';
import { nodeNameString } from '../config/node-name.ts';
import { xidConfig } from '../config/xid.ts';
import { gpuModule } from '../monitors/gpu/module.ts';
import { kernelLogModule } from '../monitors/kernel-log/module.ts';
import { hostMonitorsConfigSchema } from '../monitors/registry.ts';

export const configSchema = z.strictObject({
  nodeName: nodeNameString.optional(),
  stateDir: filePath.default('/var/lib/vigil'),
  listen: z
    .string()
    .superRefine((s, ctx) => {
      if (!parseListen(s)) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(s)}: ${LISTEN_FORMAT}` });
    })
    .default('127.0.0.1:9464'),
  logLevel: z.enum(['trace', 'debug', 'info', 'warn', 'error']).default('info'),
  conditions: z.strictObject({ names: conditionNames.prefault({}) }).prefault({}),
  xid: xidConfig.prefault({}),
  engine: engineConfig.prefault({}),
  /** Retries of a source that cannot see, with backoff. */
  sourceRetry: sourceRetryConfig.prefault({}),
  kernelLog: kernelLogModule.schema.prefault({}),
  kubernetes: kubernetesConfig.prefault({}),
  /** Diagnostic bundles: NodeDiagnostic requests and automatic capture on Fatal findings. */
  diagnostics: diagnosticsConfig.prefault({}),
  /** Optional cordon + taint on a Fatal condition (off by default). */
  quarantine: quarantineConfig.prefault({}),
  /** The NVIDIA GPU monitor (NVML). */
  gpu: gpuModule.schema.prefault({}),
  /** The polled monitors (src/monitors/registry.ts): kernel, networking, storage, container runtime. */
  monitors: hostMonitorsConfigSchema,
});

export type VigilConfig = z.output<typeof configSchema>;
