import { z } from 'zod';
import { parseDuration } from '../util/duration.ts';

/** A duration: milliseconds as a number, or a string such as '250ms', '30s', '5m'. Parses to ms. */
export const durationValue = z.union([z.number().int().min(0), z.string()]).transform((v, ctx) => {
  if (typeof v === 'number') return v;
  const ms = parseDuration(v);
  if (ms === undefined) {
    ctx.addIssue({ code: 'custom', message: `"${v}" is not a duration (use e.g. 500ms, 30s, 5m, 1h)` });
    return z.NEVER;
  }
  return ms;
});

/** A config duration with a default (given either way; it goes through the same parsing). */
export const duration = (def: number | string) => durationValue.prefault(def);
