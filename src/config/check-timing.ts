/** Pieces every polled monitor's config section is built from: a check's schedule, a ratio. Durations: ms or '30s'/'5m'. */
import * as z from 'zod';
import { positiveDuration } from './duration.ts';

export const MINUTE = 60_000;

/** A fraction in [0, 1] (usage ratios). */
export const ratio = (d: number) => z.number().min(0).max(1).default(d);

/** Scheduling of one check: `{enabled, interval, budget}`. */
export function checkTiming(intervalMs: number, budgetMs = 10_000) {
  return z
    .strictObject({ enabled: z.boolean().default(true), interval: positiveDuration(intervalMs), budget: positiveDuration(budgetMs) })
    .prefault({})
    .refine((t) => t.budget <= t.interval, { message: 'need budget <= interval' })
    .transform((t) => ({ enabled: t.enabled, intervalMs: t.interval, budgetMs: t.budget }));
}
