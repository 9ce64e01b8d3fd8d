/**
 * `vigil scan` and the live agent take one path: the same fixture, fed through `vigil scan --json`
 * and written line by line to the real /dev/kmsg for the kernel-log monitor + pipeline + engine,
 * gives the same findings (reason and entity, in order). The fixture covers what the old scan got
 * wrong: repeats, an ignored Xid, an escalation, a threshold, NPD rules next to built-in ones.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { createEngine } from '../../src/app/index.ts';
import { loadRuleFiles } from '../../src/monitors/index.ts';
import { loadConfig } from '../../src/settings/index.ts';
import { KernelLogMonitor } from '../../src/monitors/index.ts';
import { allConditions, createPipeline, declaredConditions, kernelLogClassifierOptions } from '../../src/pipeline/index.ts';
import { KmsgReader } from '../../src/sources/index.ts';
import { errorCode } from '../../src/util/index.ts';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg } from '../helpers/agent-process.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const FIXTURE = path.join(root, 'test/fixtures/kmsg/equivalence.txt');
const NPD_STOCK = path.join(root, 'test/fixtures/kmsg/npd-kernel-monitor.json');

type Row = [reason: string, entity: string];

function scan(args: string[]): Row[] {
  const r = spawnSync(process.execPath, [path.join(root, 'bin/vigil.js'), 'scan', '--json', ...args], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { reason: string; entity: string })
    .map((x) => [x.reason, x.entity]);
}

/** Every record of the kernel ring that carries the token, as raw /dev/kmsg text (what `cat /dev/kmsg` prints). */
function dumpKmsg(token: string): string {
  const fd = openSync('/dev/kmsg', constants.O_RDONLY | constants.O_NONBLOCK);
  const buf = Buffer.alloc(16 * 1024);
  let out = '';
  try {
    for (;;) {
      let n: number;
      try {
        n = readSync(fd, buf, 0, buf.length, null);
      } catch (err) {
        const code = errorCode(err);
        if (code === 'EPIPE') continue; // overwritten while reading: go on from the oldest left
        if (code === 'EAGAIN') break;
        throw err;
      }
      const rec = buf.toString('utf8', 0, n);
      if (rec.includes(token)) out += rec;
    }
  } finally {
    closeSync(fd);
  }
  return out;
}

test('a fixture gives the same findings through vigil scan and through the live /dev/kmsg path', { timeout: 180_000 }, async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-equivalence-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const token = `veq${randomBytes(6).toString('hex')}`;
  const lines = readFileSync(FIXTURE, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => l.replaceAll('{token}', token));
  const configFile = path.join(dir, 'vigil.yaml');
  writeFileSync(
    configFile,
    [
      'xid:',
      '  ignore: [31]',
      'kernelLog:',
      '  pcieCorrected: {count: 10, window: 1h}',
      `  npdConfigs: [${JSON.stringify(NPD_STOCK)}]`,
      '',
    ].join('\n'),
  );

  // The live path: real /dev/kmsg, KernelLogMonitor, the pipeline and the engine, as build-monitors wires them.
  const config = loadConfig(configFile);
  const rules = loadRuleFiles(config.kernelLog);
  const registry = new Registry();
  const engine = createEngine(config, { bootId: 'live', conditions: allConditions(config, declaredConditions(rules)), registry });
  const live: Row[] = [];
  engine.on((e) => {
    if (e.kind === 'finding') live.push([e.finding.reason, e.finding.entity]);
  });
  let seen = 0;
  const monitor = new KernelLogMonitor({
    reader: { path: '/dev/kmsg', lookbackMs: 0 },
    classifier: kernelLogClassifierOptions(config, rules),
    registry,
    // The kernel log is shared with every other test: only this test's records go on.
    createReader: (o) =>
      new KmsgReader({
        ...o,
        onRecords: (recs) => {
          const mine = recs.filter((r) => r.message.includes(token));
          seen += mine.length;
          if (mine.length) o.onRecords?.(mine);
        },
      }),
  });
  monitor.start(createPipeline({ config, registry, engine }));
  t.after(() => monitor.stop());
  for (const l of lines) writeKmsg(l);
  const deadline = Date.now() + 60_000;
  while (seen < lines.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.equal(seen, lines.length, 'every line reached the live monitor');

  // What the fixture must show, so that "equal" is not "both empty".
  assert.deepEqual(live, [
    ['NvidiaXID48Error', 'gpu:0000:3b:00'],
    ['NvidiaXID13Warning', 'gpu:0000:cb:00'],
    ['NvidiaXID13Repeated', 'gpu:0000:cb:00'],
    ['NvidiaGPUInitFailed', 'gpu:0000:0a:00'],
    ['SoftLockup', 'cpu:6'],
    ['OOMKilling', ''],
    ['AppBlocked', ''],
    ['TaskHung', ''],
    ['DockerHung', ''],
    ['Ext4Error', 'blockdev:sdq1'],
    ['HardwareErrorFatal', ''],
    ['CperHardwareErrorFatal', ''],
    ['PCIeCorrectedErrors', 'pci:0000:00:1c.5'],
  ]);

  // The same lines as a file, and the records as /dev/kmsg printed them (with their timestamps).
  const plain = path.join(dir, 'fixture.log');
  writeFileSync(plain, `${lines.join('\n')}\n`);
  assert.deepEqual(scan(['--config', configFile, plain]), live);
  const raw = path.join(dir, 'kmsg.log');
  writeFileSync(raw, dumpKmsg(token));
  assert.deepEqual(scan(['--config', configFile, '--format', 'kmsg', raw]), live);
});

test('vigil run publishes through the same pipeline: an ignored Xid is counted, never reported', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-run-pipeline-'));
  const configFile = path.join(dir, 'vigil.yaml');
  writeFileSync(configFile, kernelLogOnlyConfig(['xid:', '  ignore: [31]']));
  const agent = await startAgent(['--standalone', '--state-dir', path.join(dir, 'state'), '--config', configFile]);
  // One hook, so the agent has stopped writing its state before the directory goes.
  t.after(async () => {
    await agent.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const ignored = uniquePci();
  const reported = uniquePci();
  writeKmsg(`NVRM: Xid (PCI:${ignored}): 31, pid=78, name=x, Ch 00000010, intr 10000000. MMU Fault`);
  writeKmsg(`NVRM: Xid (PCI:${reported}): 48, pid=77, name=x, DBE (0x1,0x2)`);
  // Records are classified in order: once the second is reported, the first has been through.
  await agent.waitFor((l) => l.event === 'finding' && l.entity === `gpu:${reported}`, 30_000);
  assert.deepEqual(
    agent.lines.filter((l) => l.entity === `gpu:${ignored}`),
    [],
  );
  assert.match(String(await agent.get('/metrics')), /vigil_findings_suppressed_total\{why="ignored_xid"\} [1-9]/);
});
