import { z } from 'zod';
import { parseDuration } from '../util/duration.ts';

/** A config duration ("30s", "5m", "1h", "0"), parsed to milliseconds. */
export const duration = (def: string) =>
  z
    .string()
    .default(def)
    .transform((text, ctx) => {
      const ms = parseDuration(text);
      if (ms === undefined) {
        ctx.addIssue({ code: 'custom', message: `"${text}" is not a duration (use e.g. 500ms, 30s, 5m, 1h)` });
        return z.NEVER;
      }
      return ms;
    });
