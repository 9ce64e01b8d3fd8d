/** The engine's section (\`engine\`): repeats, flapping, escalations, the recovery tick. The engine's own defaults are these. */
import * as z from 'zod';
import { duration, positiveDuration } from './duration.ts';
import { regexString } from './regex.ts';

const escalation = z.strictObject({
  match: regexString,
  count: z.number().int().min(2),
  window: duration('10m'),
  raise: z.string().min(1),
});

export const engineConfig = z.strictObject({
  /** A repeat of an active problem is logged/re-emitted at most once per window; repeats are counted. */
  repeatWindow: duration('1m'),
  flap: z.strictObject({ maxActivations: z.number().int().min(1).default(4), window: duration('30m') }).prefault({}),
  escalations: z
    .array(escalation)
    .prefault([{ match: 'NvidiaXID(13|31|43)Warning', count: 5, window: '10m', raise: 'NvidiaXID$1Repeated' }]),
  /** How often ttl recovery is evaluated. */
  tick: positiveDuration('30s'),
});

/** The section's defaults, for an engine built without configuration (tests, tools). */
export const ENGINE_DEFAULTS = engineConfig.parse({});
