/**
 * The configuration as a whole: the core sections of src/config with every monitor's own section
 * (the polled ones from src/monitors/registry.ts), and the loaders that validate a file against it.
 */
export { configSchema, type VigilConfig } from './schema.ts';
export { loadConfig, parseConfig } from './load.ts';
