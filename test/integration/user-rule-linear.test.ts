/**
 * Issue #22, point 7: a user rule or NPD pattern such as `(.*a){20}x` or `(?:.*,){12}X`, which a
 * backtracking engine takes forever on, must not freeze the agent. The real agent reads the real
 * /dev/kmsg with such rules, is sent the lines that defeat a backtracking engine, and must go on
 * answering /healthz and /livez, report the lines that match, and stop on SIGTERM.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { kernelLogOnlyConfig, startAgent, writeKmsg, type AgentProcess } from '../helpers/agent-process.ts';

/** A status within `ms`, or 'no answer'. */
async function statusWithin(agent: AgentProcess, pathname: string, ms: number): Promise<number | string> {
  try {
    const res = await fetch(`http://127.0.0.1:${agent.port}${pathname}`, { signal: AbortSignal.timeout(ms) });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 'no answer';
  }
}

test('an agent with user and NPD rules that backtrack catastrophically stays responsive, reports the matching lines and stops on SIGTERM', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-redos-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tag = `vigil-redos-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const rules = path.join(dir, 'rules.yaml');
  writeFileSync(
    rules,
    [
      'rules:',
      `  - {name: issue-a, pattern: '${tag} (.*a){20}x', reason: VigilRedosA, severity: Warning, condition: KernelReady}`,
      `  - {name: issue-comma, pattern: '${tag} (?:.*,){12}X', reason: VigilRedosComma, severity: Warning, condition: KernelReady}`,
      '',
    ].join('\n'),
  );
  const npd = path.join(dir, 'npd.json');
  writeFileSync(
    npd,
    JSON.stringify({
      plugin: 'kmsg',
      source: 'redos-monitor',
      rules: [{ type: 'temporary', reason: 'VigilRedosNpd', pattern: `${tag}-npd (?:.*;){12}Z` }],
    }),
  );
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(
    config,
    kernelLogOnlyConfig().replace(
      'kernelLog:\n',
      `kernelLog:\n  userRules: [${JSON.stringify(rules)}]\n  npdConfigs: [${JSON.stringify(npd)}]\n`,
    ),
  );
  const agent = await startAgent(['--standalone', '--state-dir', dir, '--config', config]);
  t.after(() => {
    if (agent.child.exitCode === null && agent.child.signalCode === null) agent.child.kill('SIGKILL');
  });

  // Lines that do not match: a backtracking engine tries every way to split them, which never ends.
  writeKmsg(`${tag} ${'a'.repeat(300)}`);
  writeKmsg(`${tag} ${','.repeat(300)}`);
  writeKmsg(`${tag}-npd ${';'.repeat(300)}`);
  // Lines that match, after them.
  writeKmsg(`${tag} ${'a'.repeat(40)}x`);
  writeKmsg(`${tag} ${','.repeat(20)}X`);
  writeKmsg(`${tag}-npd ${';'.repeat(20)}Z`);

  const reported = (reason: string) => (l: Record<string, unknown>) => l.event === 'finding' && l.reason === reason;
  await agent.waitFor(reported('VigilRedosA'), 20_000);
  await agent.waitFor(reported('VigilRedosComma'), 20_000);
  await agent.waitFor(reported('VigilRedosNpd'), 20_000);
  assert.equal(agent.lines.filter(reported('VigilRedosA')).length, 1, 'only the matching line is reported');
  assert.ok(String(agent.lines.find(reported('VigilRedosA'))?.msg).includes(`${'a'.repeat(40)}x`), 'the finding carries the matching line');

  assert.equal(await statusWithin(agent, '/healthz', 5_000), 200, '/healthz answers');
  assert.equal(await statusWithin(agent, '/livez', 5_000), 200, '/livez answers');

  const exited = await Promise.race([agent.stop(), new Promise<string>((res) => setTimeout(() => res('still running'), 10_000))]);
  assert.equal(exited, 0, 'SIGTERM stops the agent');
});
