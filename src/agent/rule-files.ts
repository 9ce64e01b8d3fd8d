/** Loads the rule files a configuration names; errors name the file, the rule and the field. */
import type { VigilConfig } from '../config/load.ts';
import { loadUserRules, type UserRule } from '../monitors/kernel-log/user-rules.ts';
import { loadNpdConfig, type NpdConfig } from '../monitors/kernel-log/npd.ts';
import { errorMessage } from '../util/errors.ts';

export interface RuleFiles {
  userRules: UserRule[];
  npd: NpdConfig[];
  summary: string;
}

export function loadRuleFiles(config: VigilConfig): RuleFiles {
  const errors: string[] = [];
  const userRules: UserRule[] = [];
  const npd: NpdConfig[] = [];
  for (const file of config.kernelLog.userRules) {
    try {
      userRules.push(...loadUserRules(file));
    } catch (err) {
      errors.push(errorMessage(err));
    }
  }
  for (const file of config.kernelLog.npdConfigs) {
    try {
      npd.push(loadNpdConfig(file));
    } catch (err) {
      errors.push(errorMessage(err));
    }
  }
  if (errors.length) throw new Error(errors.join('\n'));
  const npdRules = npd.reduce((n, c) => n + c.rules.length, 0);
  return { userRules, npd, summary: `${userRules.length} user rules, ${npd.length} NPD files with ${npdRules} rules` };
}
