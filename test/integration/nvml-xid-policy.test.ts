/**
 * The Xid table through the real NVML path: events from the fake library, read by the event
 * worker through koffi and published by GpuMonitor, against the kernel-log classifier's reading
 * of the same Xid on the same GPU.
 */
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Finding } from '../../src/api/index.ts';
import { KernelLogClassifier } from '../../src/monitors/index.ts';
import { eventsOnTwoGpus } from './nvml-helpers.ts';

const kernel = (message: string): Finding => {
  const [f] = new KernelLogClassifier().classify({ message }, Date.now());
  assert.ok(f, `a finding for ${message}`);
  return f;
};

test('Xids 1-160 and the Xid 154 recovery actions: NVML events and kernel-log lines agree on reason and entity', async (t) => {
  const { env, sink, pci } = await eventsOnTwoGpus(t);

  for (let code = 1; code <= 160; code++) env.event({ gpu: 1, type: 8, data: code });
  await sink.waitFor((f) => f.attrs?.xid === 160, 20_000);
  const xids = sink.findings.filter((f) => typeof f.attrs?.xid === 'number');
  assert.equal(xids.length, 160);
  for (const n of xids) {
    const code = n.attrs!.xid as number;
    // 144-150 without a severity token and 154 with no action in force: what NVML knows of them.
    const text =
      code === 154 ? 'GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)' : 'pid=77, name=train, Ch 00000008';
    const k = kernel(`NVRM: Xid (PCI:${pci}): ${code}, ${text}`);
    assert.deepEqual([n.reason, n.entity], [k.reason, k.entity], `Xid ${code}`);
  }

  // Xid 154: the worker reads the recovery action (field 230) the kernel line states.
  const names: Record<number, string> = { 1: 'GPU Reset Required', 2: 'Node Reboot Required', 3: 'Drain P2P', 4: 'Drain and Reset' };
  for (const [action, name] of Object.entries(names).map(([a, n]) => [Number(a), n] as const)) {
    sink.clear();
    env.gpu(1, { recoveryAction: action });
    env.event({ gpu: 1, type: 8, data: 154 });
    const n = await sink.waitFor((f) => f.attrs?.xid === 154, 5_000);
    const k = kernel(`NVRM: Xid (PCI:${pci}): 154, GPU recovery action changed from 0x0 (None) to 0x${action} (${name})`);
    assert.deepEqual([n.reason, n.entity, n.attrs?.recoveryAction], [k.reason, k.entity, action], `Xid 154 to ${name}`);
  }
});
