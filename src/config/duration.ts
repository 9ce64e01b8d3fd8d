import * as z from 'zod';
import { parseDuration, timerLimitProblem } from '../util/duration.ts';

/**
 * A duration: milliseconds as a number, or a string such as '250ms', '30s', '5m', '1h30m'. Parses
 * to ms. Capped at what a timer can hold: above it Node fires the timer after 1 ms and it spins.
 */
export const durationValue = z.union([z.number().int().min(0), z.string().max(64)]).transform((v, ctx) => {
  const ms = typeof v === 'number' ? v : parseDuration(v);
  if (ms === undefined) {
    ctx.addIssue({ code: 'custom', message: `expected a duration such as 500ms, 30s, 5m or 1h, not "${String(v)}"` });
    return z.NEVER;
  }
  const tooLong = timerLimitProblem(ms);
  if (tooLong) {
    ctx.addIssue({ code: 'custom', message: `${tooLong}, not ${JSON.stringify(v)}` });
    return z.NEVER;
  }
  return ms;
});

/** A duration that must be more than 0: a timer period or a timeout, where 0 would spin or fail at once. */
export const positiveDurationValue = durationValue.refine((ms) => ms > 0, 'must be more than 0 (0 would spin or time out at once)');

/** A config duration with a default (given either way; it goes through the same parsing). */
export const duration = (def: number | string) => durationValue.prefault(def);

/** A config duration with a default that must be more than 0. */
export const positiveDuration = (def: number | string) => positiveDurationValue.prefault(def);
