/**
 * `vigil check-config FILE`: validates a configuration and every rule file it names, with the same
 * checks `run` applies when it loads them, so a file that passes here does not break `run`.
 */
import { loadConfig } from '../settings/index.ts';
import { loadRuleFiles } from '../monitors/kernel-log/rule-files.ts';
import { messageWithCode } from '../util/errors.ts';

export function runCheckConfigCommand(file: string): number {
  try {
    const config = loadConfig(file);
    const rules = loadRuleFiles(config.kernelLog);
    process.stdout.write(`${file}: ok (${rules.summary})\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`${messageWithCode(err)}\n`);
    return 2;
  }
}
