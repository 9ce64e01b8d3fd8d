/** Loads the rule files a configuration names; errors name the file, the rule and the field. */
import { readConfigText } from '../../config/read-file.ts';
import type { KernelLogConfig } from './config.ts';
import { parseUserRules, type UserRule } from './user-rules.ts';
import { parseNpdConfig, type NpdConfig } from './npd.ts';
import { errorMessage, VigilError } from '../../util/errors.ts';

/** All rule files together: each is capped by readConfigText, and their number by the schema. */
export const MAX_RULE_BYTES_TOTAL = 1024 * 1024;

export interface RuleFiles {
  userRules: UserRule[];
  npd: NpdConfig[];
  summary: string;
}

/** The rule files the kernelLog section names (`userRules`, `npdConfigs`), read and parsed. */
export function loadRuleFiles(section: Pick<KernelLogConfig, 'userRules' | 'npdConfigs'>): RuleFiles {
  const errors: string[] = [];
  const userRules: UserRule[] = [];
  const npd: NpdConfig[] = [];
  let total = 0;
  // Read with the size caps before parsing; errors name the file.
  const read = (file: string): string | undefined => {
    let text: string;
    try {
      text = readConfigText(file);
    } catch (err) {
      errors.push(`${file}: ${errorMessage(err)}`);
      return undefined;
    }
    total += Buffer.byteLength(text);
    if (total <= MAX_RULE_BYTES_TOTAL) return text;
    errors.push(`${file}: too large: the rule files together may hold ${MAX_RULE_BYTES_TOTAL / 1024} KiB`);
    return undefined;
  };
  for (const file of section.userRules) {
    const text = read(file);
    try {
      if (text !== undefined) userRules.push(...parseUserRules(text, file));
    } catch (err) {
      errors.push(errorMessage(err));
    }
  }
  for (const file of section.npdConfigs) {
    const text = read(file);
    try {
      if (text !== undefined) npd.push(parseNpdConfig(text, file));
    } catch (err) {
      errors.push(errorMessage(err));
    }
  }
  if (errors.length) throw new VigilError('VIGIL_E_RULE_FILES', errors.join('\n'));
  const npdRules = npd.reduce((n, c) => n + c.rules.length, 0);
  return { userRules, npd, summary: `${userRules.length} user rules, ${npd.length} NPD files with ${npdRules} rules` };
}
