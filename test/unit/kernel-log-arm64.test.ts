/**
 * arm64 GPU-server faults (catalog policies "Arm RAS", "IOMMU (Arm SMMUv3)", "NVLink domain (GB200)"),
 * with real lines (sources in test/fixtures/corpus/arm64-grace.yaml): what each finding carries
 * beyond its reason, and how an Arm CPER record fits the previous-boot policy.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { lookupReason } from '../../src/catalog/index.ts';
import { KernelLogClassifier, BUILTIN_RULES } from '../../src/monitors/index.ts';
import { replayText } from '../helpers/corpus.ts';

const reasons = (text: string) => replayText(text).map((f) => f.reason);

test('an SMMUv3 event is an IOMMUFault on its SMMU, raw or decoded, with the event name and the client in attrs', () => {
  const c = new KernelLogClassifier();
  const [raw] = c.classify({ message: 'arm-smmu-v3 arm-smmu-v3.5.auto: event 0x10 received:' }, 1);
  assert.equal(raw.reason, 'IOMMUFault');
  assert.equal(raw.entity, 'smmu:arm-smmu-v3.5.auto');
  assert.deepEqual(raw.attrs, { smmu: 'arm-smmu-v3.5.auto', event: 'F_TRANSLATION', eventId: 0x10 });
  const [decoded] = c.classify(
    {
      message: 'arm-smmu-v3 arm-smmu-v3.5.auto: event: F_TRANSLATION client: 0001:06:00.0 sid: 0x20600 ssid: 0x0 iova: 0xff9bc000 ipa: 0x0',
    },
    2,
  );
  // The same event's two lines are one problem: same reason, same entity.
  assert.equal(decoded.reason, 'IOMMUFault');
  assert.equal(decoded.entity, raw.entity);
  assert.equal(decoded.attrs?.client, '0001:06:00.0');
  assert.equal(decoded.attrs?.sid, '0x20600');
  // A device-tree SMMU is named by its node.
  const [dt] = c.classify({ message: 'arm-smmu-v3 fc900000.iommu: event 0x13 received:' }, 3);
  assert.equal(dt.entity, 'smmu:fc900000.iommu');
  assert.equal(dt.attrs?.event, 'F_PERMISSION');
  assert.equal(lookupReason('IOMMUFault')?.severity, 'Warning');
});

test('an SMMU that failed (CMD_SYNC timeout, global error) is a Fatal IOMMUError; its detail and probe lines raise nothing', () => {
  assert.deepEqual(reasons('arm-smmu-v3 arm-smmu-v3.13.auto: unexpected global error reported (0x00000001), this could be serious'), [
    'IOMMUError',
  ]);
  assert.deepEqual(reasons('platform arm-smmu-v3.0.auto: CMD_SYNC timeout at 0x00000146 [hwprod 0x00000146, hwcons 0x00000000]'), [
    'IOMMUError',
  ]);
  assert.deepEqual(reasons('arm-smmu-v3 arm-smmu-v3.13.auto: CMDQ error (cons 0x030120f3): ATC invalidate timeout'), []);
  assert.deepEqual(reasons('[    2.742759] arm-smmu-v3 arm-smmu-v3.10.auto: no priq irq - PRI will be broken'), []);
  assert.equal(lookupReason('IOMMUError')?.severity, 'Fatal');
});

test('an arm64 SError or unclaimed synchronous external abort is MachineCheckUncorrected with the CPU and ESR', () => {
  const c = new KernelLogClassifier();
  const [s] = c.classify({ message: 'SError Interrupt on CPU3, code 0x00000000bf000002 -- SError', uptimeMs: 51_278 }, 1);
  assert.equal(s.reason, 'MachineCheckUncorrected');
  assert.deepEqual(s.attrs, { cpu: 3, esr: '00000000bf000002', abort: 'SError' });
  const [sea] = c.classify({ message: 'Internal error: synchronous external abort: 96000610 [#1] PREEMPT SMP' }, 2);
  assert.equal(sea.reason, 'MachineCheckUncorrected');
  assert.equal(sea.attrs?.esr, '96000610');
  // The panic names its cause: the cause's reason, not KernelBug.
  assert.deepEqual(reasons('Kernel panic - not syncing: Asynchronous SError Interrupt'), ['MachineCheckUncorrected']);
  // Other panics and Oopses keep KernelBug.
  assert.deepEqual(reasons('Kernel panic - not syncing: Fatal exception in interrupt'), ['KernelBug']);
});

// The BERT header is from yangxiaohua2009/custom-kernel#6 (corpus previous-boot.yaml), the record from the
// Huawei TaiShan 2280 V2 report (corpus arm64-grace.yaml): each line is real, the pairing is the test's.
const ARM_RECORD = [
  '[Hardware Error]: event severity: recoverable',
  '[Hardware Error]:  Error 0, type: recoverable',
  '[Hardware Error]:   section_type: ARM processor error',
  '[Hardware Error]:   MIDR: 0x00000000481fd010',
];

test('an ARM processor error record under the BERT header is PreviousBootHardwareError, as any CPER record there', () => {
  const text = ['[    2.345569] BERT: Error records from previous boot:', ...ARM_RECORD.map((l) => `[    2.345575] ${l}`)].join('\n');
  assert.deepEqual(reasons(text), ['PreviousBootHardwareError']);
  // The same record from GHES (a "{N}" sequence prefix) early in the boot is this boot's: BERT decides, not the time.
  const ghes = ARM_RECORD.map((l) => `[    0.096683] {1}${l}`).join('\n');
  assert.deepEqual(reasons(ghes), ['HardwareErrorCorrected']);
});

test('an Xid 154 asking to recover the IMEX domain is a warning (the domain recovers, not this GPU)', () => {
  assert.deepEqual(reasons('NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)'), [
    'NvidiaXID154Warning',
  ]);
});

test('the built-in rules fit the classifier bit mask', () => {
  assert.ok(BUILTIN_RULES.length <= 31, `${BUILTIN_RULES.length} rules`);
});
