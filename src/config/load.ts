/**
 * Loads and validates the YAML configuration. Every error names the file and the field, and all
 * errors are reported at once.
 */
import { readFileSync } from 'node:fs';
import YAML from 'yaml';
import { errorMessage } from '../util/errors.ts';
import { configSchema, type VigilConfig } from './schema.ts';

export type { VigilConfig };

export class ConfigError extends Error {
  readonly code = 'VIGIL_CONFIG_INVALID';
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

export function parseConfig(text: string, source = 'config'): VigilConfig {
  let raw: unknown;
  try {
    const doc = YAML.parseDocument(text, { uniqueKeys: true });
    if (doc.errors.length) throw new Error(doc.errors.map((e) => e.message).join('; '));
    raw = doc.toJS() ?? {};
  } catch (err) {
    throw new ConfigError(`${source}: not valid YAML: ${errorMessage(err)}`);
  }
  const result = configSchema.safeParse(raw);
  if (!result.success) {
    const lines = result.error.issues.map((i) => {
      const field = i.path.length ? i.path.join('.') : '(top level)';
      const keys = 'keys' in i && Array.isArray(i.keys) ? ` (${i.keys.join(', ')})` : '';
      return `  ${field}: ${i.message}${keys}`;
    });
    throw new ConfigError(`${source}: invalid configuration:\n${lines.join('\n')}`);
  }
  return result.data;
}

export function loadConfig(file: string | undefined): VigilConfig {
  if (!file) return parseConfig('{}', 'defaults');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`${file}: cannot read: ${errorMessage(err)}`);
  }
  return parseConfig(text, file);
}
