/** The kernel checks' section (`monitors.kernel`). Every field has a default. */
import * as z from 'zod';
import { checkTiming, MINUTE, ratio } from '../../config/check-timing.ts';
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

export type KernelConfig = z.output<typeof kernelConfigSchema>;
