/**
 * Reads and validates a YAML configuration against a schema (src/settings gives the whole file's).
 * Every error names the file and the field, and all errors are reported at once.
 */
import YAML from 'yaml';
import type * as z from 'zod';
import { errorMessage, VigilError } from '../util/errors.ts';
import { MAX_CONFIG_FILE_BYTES, readConfigText } from './read-file.ts';

export class ConfigError extends VigilError {
  constructor(message: string) {
    super('VIGIL_E_CONFIG', message);
    this.name = 'ConfigError';
  }
}

/**
 * Aliases resolved per document at most (yaml's own default, pinned): each alias may repeat a whole
 * anchored tree, so a few nested ones ("billion laughs") would otherwise expand without bound.
 */
const MAX_ALIASES = 100;

export function parseYamlConfig<S extends z.ZodType>(schema: S, text: string, source = 'config'): z.output<S> {
  // Checked before parsing: the parser's time and memory grow with the text (see read-file.ts).
  if (Buffer.byteLength(text) > MAX_CONFIG_FILE_BYTES) {
    throw new ConfigError(`${source}: too large: the limit is ${MAX_CONFIG_FILE_BYTES / 1024} KiB`);
  }
  let raw: unknown;
  try {
    const doc = YAML.parseDocument(text, { uniqueKeys: true });
    if (doc.errors.length) throw new Error(doc.errors.map((e) => e.message).join('; '));
    raw = doc.toJS({ maxAliasCount: MAX_ALIASES }) ?? {};
  } catch (err) {
    throw new ConfigError(`${source}: not valid YAML: ${errorMessage(err)}`);
  }
  const result = schema.safeParse(raw);
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

export function loadYamlConfig<S extends z.ZodType>(schema: S, file: string | undefined): z.output<S> {
  if (!file) return parseYamlConfig(schema, '{}', 'defaults');
  let text: string;
  try {
    text = readConfigText(file);
  } catch (err) {
    throw new ConfigError(`${file}: ${errorMessage(err)}`);
  }
  return parseYamlConfig(schema, text, file);
}
