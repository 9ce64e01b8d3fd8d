/** `vigil check-config FILE`: validates a configuration and every rule file it names. */
import { loadConfig } from '../config/load.ts';
import { loadRuleFiles } from '../agent/rule-files.ts';

export async function runCheckConfigCommand(file: string): Promise<number> {
  try {
    const config = loadConfig(file);
    const rules = loadRuleFiles(config);
    process.stdout.write(`${file}: ok (${rules.summary})\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 2;
  }
}
