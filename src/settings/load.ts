/** Loads the configuration file: YAML, validated against the whole schema; errors name the file and the field. */
import { loadYamlConfig, parseYamlConfig } from '../config/load.ts';
import { configSchema, type VigilConfig } from './schema.ts';

export function parseConfig(text: string, source = 'config'): VigilConfig {
  return parseYamlConfig(configSchema, text, source);
}

export function loadConfig(file: string | undefined): VigilConfig {
  return loadYamlConfig(configSchema, file);
}
