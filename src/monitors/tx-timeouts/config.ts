/** The transmit-timeout check's section (`monitors.txTimeouts`). Every field has a default. */
import * as z from 'zod';
import { checkTiming, MINUTE } from '../../config/check-timing.ts';
import { regexList } from '../../config/regex.ts';

export const txTimeoutsConfigSchema = z
  .strictObject({
    enabled: z.boolean().default(true),
    /** One readdir and one small read per transmit queue; sysfs only, no driver call. */
    checks: z.strictObject({ queues: checkTiming(5 * MINUTE) }).prefault({}),
    /** Interfaces whose name matches are not checked. */
    excludedInterfaces: regexList([]),
  })
  .prefault({});

export type TxTimeoutsConfig = z.output<typeof txTimeoutsConfigSchema>;
