/** The one work queue's schedule (key `monitors.scheduler`), shared by every polled check. */
import * as z from 'zod';
import { duration } from './duration.ts';

export const schedulerConfigSchema = z
  .strictObject({
    /** First runs are spread over [0, startupJitter) (capped by each check's interval). */
    startupJitter: duration(60_000),
    /** Every later run lands at interval ± jitter·interval. */
    jitter: z.number().min(0).max(0.5).default(0.1),
  })
  .prefault({});

/** The queue's defaults, for a queue built without configuration. */
export const SCHEDULER_DEFAULTS = schedulerConfigSchema.parse({});
