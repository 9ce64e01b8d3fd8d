/**
 * npm `re2` is a native addon built for one Node ABI: CI installs it for Node 24 and then runs the
 * smoke set on Node 20 with the same node_modules, where it cannot load. The agent must then run
 * user rules on re2js, say so and why in its start log, and still find what the rules match. Where
 * it loads, the same log says the rules run on native RE2. Either way the real agent reads the real
 * /dev/kmsg.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { errorMessage } from '../../src/util/index.ts';
import { kernelLogOnlyConfig, startAgent, writeKmsg } from '../helpers/agent-process.ts';

/** Why npm re2 does not load in this Node (its loader's message on one line), or undefined when it loads. */
function re2LoadError(): string | undefined {
  try {
    createRequire(import.meta.url)('re2');
    return undefined;
  } catch (err) {
    return errorMessage(err)
      .replace(/\s*\n\s*/g, ' ')
      .slice(0, 400);
  }
}

test(`a user rule runs on native RE2 where npm re2 loads in this Node (${process.version}), else on re2js with the reason logged, and finds its line either way`, async (t) => {
  const loadError = re2LoadError();
  t.diagnostic(loadError === undefined ? 'native re2 loads here' : `native re2 does not load here: ${loadError}`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-re2-engine-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tag = `vigil-re2-engine-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const rules = path.join(dir, 'rules.yaml');
  writeFileSync(
    rules,
    `rules:\n  - {name: ib, pattern: '${tag} ib(\\d+): link down', reason: VigilEngineIbDown, severity: Warning, condition: KernelReady, entity: 'ib:{1}'}\n`,
  );
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig().replace('kernelLog:\n', `kernelLog:\n  userRules: [${JSON.stringify(rules)}]\n`));
  const env = { ...process.env };
  delete env.VIGIL_REGEX_ENGINE;
  const agent = await startAgent(['--standalone', '--state-dir', dir, '--config', config], env);
  t.after(async () => {
    await agent.stop();
  });

  const engine = await agent.waitFor((l) => l.event === 'user_rule_engine');
  if (loadError === undefined) {
    assert.deepEqual([engine.nativeLoaded, engine.native, engine.patterns], [true, 1, 1]);
    assert.equal(engine.msg, 'kernel log: 1 of 1 user/NPD patterns run on native RE2');
  } else {
    assert.deepEqual([engine.nativeLoaded, engine.native, engine.patterns], [false, 0, 1]);
    assert.equal(
      engine.msg,
      `kernel log: 0 of 1 user/NPD patterns run on native RE2, the rest on re2js (native re2 did not load: ${loadError})`,
    );
  }

  writeKmsg(`${tag} ib7: link down`);
  const finding = await agent.waitFor((l) => l.event === 'finding' && l.reason === 'VigilEngineIbDown', 30_000);
  assert.equal(finding.entity, 'ib:7');
  assert.equal(await agent.stop(), 0);
});
