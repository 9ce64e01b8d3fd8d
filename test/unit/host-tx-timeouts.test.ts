import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { POLLED_MONITORS, buildHostChecks, hostMonitorsConfigSchema, type HostCheck } from '../../src/monitors/index.ts';
import { parseConfig } from '../../src/settings/index.ts';

/** A host root whose sysfs shows `counts` as each interface's tx-<n>/tx_timeout. */
function sysfs(counts: Record<string, number[]>, root = mkdtempSync(path.join(tmpdir(), 'vigil-txq-'))): string {
  for (const [iface, queues] of Object.entries(counts)) {
    queues.forEach((n, i) => {
      const dir = path.join(root, 'sys/class/net', iface, 'queues', `tx-${i}`);
      mkdirSync(dir, { recursive: true });
      writeFileSync(path.join(dir, 'tx_timeout'), `${n}\n`);
    });
    mkdirSync(path.join(root, 'sys/class/net', iface, 'queues', 'rx-0'), { recursive: true });
  }
  return root;
}

function txCheck(section: object = {}): HostCheck {
  const cfg = hostMonitorsConfigSchema.parse({ txTimeouts: section });
  const check = buildHostChecks(cfg).find((c) => c.name === 'txTimeouts.queues');
  assert.ok(check, 'the registry builds txTimeouts.queues');
  return check;
}

const run = (check: HostCheck, root: string, now = 1_000) => check.run({ root, signal: new AbortController().signal, now });

test('txTimeouts is registered: its section is monitors.txTimeouts, it watches NetworkingReady', () => {
  const m = POLLED_MONITORS.find((p) => p.name === 'txTimeouts');
  assert.ok(m);
  assert.equal(m.condition, 'NetworkingReady');
  assert.equal(m.unknownReason, 'NetworkingChecksUnavailable');
  const cfg = parseConfig('monitors:\n  txTimeouts:\n    checks:\n      queues:\n        interval: 1m\n');
  assert.deepEqual(cfg.monitors.txTimeouts.checks.queues, { enabled: true, intervalMs: 60_000, budgetMs: 10_000 });
  assert.throws(() => parseConfig('monitors:\n  txTimeouts:\n    bogus: 1\n'), /monitors\.txTimeouts.*bogus/);
  assert.equal(
    buildHostChecks(hostMonitorsConfigSchema.parse({ txTimeouts: { enabled: false } })).some((c) => c.name.startsWith('txTimeouts.')),
    false,
  );
});

test('a transmit queue whose tx_timeout grew raises NetworkTxTimeout on netif:<name>; the first poll only sets the baseline', async () => {
  const root = sysfs({ eth0: [3, 0], eth1: [7] });
  try {
    const check = txCheck();
    assert.deepEqual((await run(check, root)).findings, [], 'first poll: baseline only');
    sysfs({ eth0: [5, 1], eth1: [7] }, root);
    const report = await run(check, root, 2_000);
    assert.equal(report.findings.length, 1);
    const [f] = report.findings;
    assert.equal(f?.reason, 'NetworkTxTimeout');
    assert.equal(f?.entity, 'netif:eth0');
    assert.equal(f?.source, 'sysfs');
    assert.deepEqual(f?.attrs, { interface: 'eth0', timeouts: 3, queues: 'tx-0,tx-1' });
    assert.equal(f?.at, 2_000);
    assert.deepEqual((await run(check, root, 3_000)).findings, [], 'no growth, no finding');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('a counter that went down (driver reloaded) is a new baseline, not a fault; excluded interfaces are not read', async () => {
  const root = sysfs({ eth0: [9], veth1: [0] });
  try {
    const check = txCheck({ excludedInterfaces: ['^veth'] });
    await run(check, root);
    sysfs({ eth0: [2], veth1: [4] }, root);
    assert.deepEqual((await run(check, root)).findings, []);
    sysfs({ eth0: [4], veth1: [8] }, root);
    assert.deepEqual(
      (await run(check, root)).findings.map((f) => [f.entity, f.attrs?.timeouts]),
      [['netif:eth0', 2]],
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('a host without the counter skips the check', async () => {
  const root = mkdtempSync(path.join(tmpdir(), 'vigil-txq-'));
  try {
    assert.equal((await run(txCheck(), root)).status, 'skipped');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
