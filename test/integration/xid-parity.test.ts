/**
 * Xid parity, as a table: every Xid in NVIDIA's catalog (1-172) and the unknown-Xid marker 999,
 * seen through NVML (an event from the fake library, read by the real event worker through koffi
 * and judged by GpuMonitor) and through the kernel log (the classifier on the NVRM line of the same
 * fault on the same GPU), gives the same reason, severity and entity. Both go through the one Xid
 * policy (src/monitors/xid/policy.ts); the sub-decodes are covered too: Xid 144-150 by severity
 * token (NVML: by the recovery action the driver sets) and Xid 154 by recovery action.
 */
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Finding } from '../../src/api/index.ts';
import { lookupReason } from '../../src/catalog/index.ts';
import { KernelLogClassifier } from '../../src/monitors/index.ts';
import { eventsOnTwoGpus } from './nvml-helpers.ts';

const CATALOG_XIDS = [...Array.from({ length: 172 }, (_, i) => i + 1), 999];
const NVLINK5 = [144, 145, 146, 147, 148, 149, 150];
const ACTIONS: [number, string][] = [
  [0, 'None'],
  [1, 'GPU Reset Required'],
  [2, 'Node Reboot Required'],
  [3, 'Drain P2P'],
  [4, 'Drain and Reset'],
  [5, 'Recover IMEX Domain'],
];

const classifier = new KernelLogClassifier();
function kernel(message: string): Finding {
  const [f] = classifier.classify({ message }, Date.now());
  assert.ok(f, `the kernel-log classifier gives a finding for ${message}`);
  return f;
}

const view = (f: Finding) => ({ reason: f.reason, severity: lookupReason(f.reason)?.severity, entity: f.entity });

test('every catalog Xid gives the same reason, severity and entity through NVML events and the kernel log', async (t) => {
  const { env, sink, pci } = await eventsOnTwoGpus(t);
  const rows: { case: string; nvml: ReturnType<typeof view>; kmsg: ReturnType<typeof view> }[] = [];

  // Xids without a sub-decode: all at once, in order.
  const plain = CATALOG_XIDS.filter((x) => !NVLINK5.includes(x) && x !== 154);
  for (const code of plain) env.event({ gpu: 1, type: 8, data: code });
  await sink.waitFor((f) => f.attrs?.xid === 999, 30_000);
  for (const code of plain) {
    const n = sink.findings.find((f) => f.attrs?.xid === code);
    assert.ok(n, `NVML reported Xid ${code}`);
    const k = kernel(`NVRM: Xid (PCI:${pci}): ${code}, pid=4242, name=python3, Ch 00000010`);
    rows.push({ case: `Xid ${code}`, nvml: view(n), kmsg: view(k) });
  }

  // One at a time: each needs its own recovery action in force when the worker reads field 230.
  const one = async (code: number, action: number): Promise<Finding> => {
    sink.clear();
    env.gpu(1, { recoveryAction: action });
    env.event({ gpu: 1, type: 8, data: code });
    return sink.waitFor((f) => f.attrs?.xid === code, 5_000);
  };
  for (const code of NVLINK5) {
    for (const [token, action] of [
      ['Fatal', 1],
      ['Nonfatal', 0],
    ] as const) {
      const n = await one(code, action);
      const k = kernel(`NVRM: Xid (PCI:${pci}): ${code}, RLW_REMAP ${token} XC0 i0 Link 08 (0x004c8004 0x00000000 0x00000000 0x00000000)`);
      rows.push({ case: `Xid ${code} ${token}`, nvml: view(n), kmsg: view(k) });
    }
  }
  for (const [action, name] of ACTIONS) {
    const n = await one(154, action);
    const k = kernel(`NVRM: Xid (PCI:${pci}): 154, GPU recovery action changed from 0x0 (None) to 0x${action} (${name})`);
    rows.push({ case: `Xid 154 to ${name}`, nvml: view(n), kmsg: view(k) });
  }

  assert.equal(rows.length, CATALOG_XIDS.length - NVLINK5.length - 1 + NVLINK5.length * 2 + ACTIONS.length);
  const differ = rows.filter((r) => JSON.stringify(r.nvml) !== JSON.stringify(r.kmsg));
  assert.deepEqual(differ, [], 'NVML and the kernel log disagree');
  // The table is not vacuous: it holds both severities, and the sub-decodes decide.
  const reasonOf = (c: string) => rows.find((r) => r.case === c)?.nvml.reason;
  assert.equal(reasonOf('Xid 48'), 'NvidiaXID48Error');
  assert.equal(reasonOf('Xid 13'), 'NvidiaXID13Warning');
  assert.equal(reasonOf('Xid 145 Fatal'), 'NvidiaXID145Error');
  assert.equal(reasonOf('Xid 145 Nonfatal'), 'NvidiaXID145Warning');
  assert.equal(reasonOf('Xid 154 to Drain and Reset'), 'NvidiaXID154Error');
  assert.equal(reasonOf('Xid 154 to Drain P2P'), 'NvidiaXID154Warning');
  assert.ok(rows.every((r) => r.nvml.entity === `gpu:${pci}`));
});
