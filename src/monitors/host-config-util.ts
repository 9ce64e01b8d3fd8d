/** Zod pieces shared by the host monitors' config schemas. */
import { z } from 'zod';

import { duration } from '../config/duration.ts';

export { duration };

/** A fraction in [0, 1] (usage ratios). */
export const ratio = (d: number) => z.number().min(0).max(1).default(d);

/** Regular expressions given as strings; invalid ones are rejected at load. */
export const regexList = (d: string[]) =>
  z
    .array(z.string())
    .default(d)
    .superRefine((list, ctx) => {
      for (const s of list) {
        try {
          new RegExp(s);
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: `bad regular expression ${JSON.stringify(s)}: ${(err as Error).message}` });
        }
      }
    });

/** Scheduling of one check: `{enabled, interval, budget}`. */
export function checkTiming(intervalMs: number, budgetMs = 10_000) {
  return z
    .object({ enabled: z.boolean().default(true), interval: duration(intervalMs), budget: duration(budgetMs) })
    .strict()
    .prefault({})
    .refine((t) => t.interval > 0 && t.budget > 0 && t.budget <= t.interval, { message: 'need 0 < budget <= interval' })
    .transform((t) => ({ enabled: t.enabled, intervalMs: t.interval, budgetMs: t.budget }));
}

export const MINUTE = 60_000;
