/** The kernel-log monitor's section (`kernelLog`): the device, the lookback, the rule files. Every field has a default. */
import { statSync } from 'node:fs';
import * as z from 'zod';
import { duration } from '../../config/duration.ts';
import { filePath, MAX_RULE_FILES } from '../../config/file-path.ts';

export const kernelLogConfig = z
  .strictObject({
    enabled: z.boolean().default(true),
    /** The kernel log device; tests point it elsewhere. */
    path: filePath.default('/dev/kmsg'),
    /** On a first start or a new boot, records younger than this are classified; 0 = only new ones. */
    lookback: duration('5m'),
    /** AER corrected errors on one device within `window` that raise PCIeCorrectedErrors. */
    pcieCorrected: z.strictObject({ count: z.number().int().min(1).default(20), window: duration('1h') }).prefault({}),
    /** YAML files of user rules (see docs/configuration.md). */
    userRules: z.array(filePath).max(MAX_RULE_FILES).default([]),
    /** node-problem-detector system-log-monitor JSON files, loaded as they are. */
    npdConfigs: z.array(filePath).max(MAX_RULE_FILES).default([]),
  })
  .superRefine((k, ctx) => {
    const problem = k.enabled ? kernelLogPathProblem(k.path) : undefined;
    if (problem) ctx.addIssue({ code: 'custom', path: ['path'], message: problem });
  });

/**
 * The reader needs a device that returns one record per read and EAGAIN when drained (/dev/kmsg),
 * or a FIFO; a regular file would be read as one blob and then spin at end of file. A path that is
 * missing or unreadable is not refused: the agent reports KernelReady Unknown until it can read.
 */
export function kernelLogPathProblem(path: string): string | undefined {
  let st;
  try {
    st = statSync(path);
  } catch {
    return undefined;
  }
  if (st.isCharacterDevice() || st.isFIFO()) return undefined;
  const kind = st.isFile() ? 'a regular file' : st.isDirectory() ? 'a directory' : 'not a device';
  return `${path} is ${kind}: expected the kernel log device (/dev/kmsg) or a FIFO`;
}

export type KernelLogConfig = z.output<typeof kernelLogConfig>;
