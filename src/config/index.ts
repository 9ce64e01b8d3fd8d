/** The whole configuration: Vigil's core options plus each monitor's own section. */
import { coreConfig } from './schema.ts';

export const configSchema = coreConfig;
