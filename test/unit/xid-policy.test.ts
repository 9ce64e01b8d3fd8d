/**
 * One Xid policy for both paths: an Xid read from an NVRM kernel-log line (KernelLogClassifier)
 * and the same Xid delivered as an NVML event (eventFindings, what GpuMonitor.onEvent publishes)
 * get the same reason and entity.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Finding } from '../../src/api/index.ts';
import { lookupReason } from '../../src/catalog/index.ts';
import {
  eventFindings,
  gpuConfigSchema,
  type GpuConfigInput,
  type GpuInfo,
  KernelLogClassifier,
  DEFAULT_FATAL_XIDS,
  decideXid,
  xidDetailFromText,
} from '../../src/monitors/index.ts';
import type { NvmlEvent } from '../../src/sources/index.ts';

const T0 = 1_700_000_000_000;
const GPU: GpuInfo = {
  index: 3,
  uuid: 'GPU-3333',
  name: 'B200',
  pci: '0000:b3:00',
  busId: '00000000:B3:00.0',
  serial: 's',
  driverVersion: '575.51',
};

/** The four PCI forms NVRM prints (§1.1): all name the GPU NVML knows as 00000000:B3:00.0. */
const PCI_FORMS = ['PCI:0000:b3:00', 'PCI:0000:B3:00.0', '0000:b3:00', 'PCI:0000:b3:00'];

/** Realistic free text after the code, in the shapes of §1.2 (with and without pid/name). */
const TEXTS = [
  'pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005',
  "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
  'Channel 00000001',
  'Channel ID 00000052 intr 02000000',
];

function kernelLine(code: number, text: string): string {
  return `NVRM: Xid (${PCI_FORMS[code % 4]}): ${code}, ${text}`;
}

function viaKernelLog(message: string, fatalXids?: readonly number[]): Finding {
  const found = new KernelLogClassifier(fatalXids ? { fatalXids } : {}).classify({ message }, T0);
  assert.equal(found.length, 1, `one finding for: ${message}`);
  return found[0];
}

function viaNvml(code: number, opts: { recoveryAction?: number | null; config?: GpuConfigInput } = {}): Finding {
  const ev: NvmlEvent = {
    index: GPU.index,
    uuid: GPU.uuid,
    busId: GPU.busId,
    eventType: 0x8, // XidCriticalError
    eventData: code,
    gpuInstanceId: 0xffffffff,
    computeInstanceId: 0xffffffff,
    recoveryAction: opts.recoveryAction ?? null,
    at: T0,
  };
  const found = eventFindings(ev, GPU, gpuConfigSchema.parse(opts.config ?? {}));
  assert.equal(found.length, 1, `one finding for Xid ${code}`);
  return found[0];
}

function assertSame(k: Finding, n: Finding, what: string): void {
  assert.equal(k.reason, n.reason, `${what}: reason`);
  assert.equal(k.entity, n.entity, `${what}: entity`);
  assert.equal(k.attrs?.xid, n.attrs?.xid, `${what}: xid attribute`);
}

/** The NVLink5 line of §1.1 (Xid 144-150), with its sub-component and severity token. */
const nvlink5 = (code: number, severity: string) =>
  kernelLine(code, `NETIR_LINK_EVT  ${severity}   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)`);

/** The Xid 154 line of §1.1, with the action now in force. */
const ACTION_TEXT: Record<number, string> = {
  0: 'None',
  1: 'GPU Reset Required',
  2: 'Node Reboot Required',
  3: 'Drain P2P',
  4: 'Drain and Reset',
  5: 'Recover IMEX Domain',
};
const xid154 = (to: number, from = 0) =>
  kernelLine(
    154,
    `GPU recovery action changed from 0x${from.toString(16)} (${ACTION_TEXT[from]}) to 0x${to.toString(16)} (${ACTION_TEXT[to]})`,
  );

test('every Xid 1-160 gets the same reason and entity from its kernel-log line and from its NVML event', () => {
  let fatal = 0;
  for (let code = 1; code <= 160; code++) {
    // What NVML can carry: the code, plus for Xid 154 the recovery action (field 230). NVLink5 lines
    // here say Nonfatal; the Fatal token, which NVML cannot carry, has its own test below.
    const line = code >= 144 && code <= 150 ? nvlink5(code, 'Nonfatal') : code === 154 ? xid154(3) : kernelLine(code, TEXTS[code % 4]);
    const k = viaKernelLog(line);
    const n = viaNvml(code, code === 154 ? { recoveryAction: 3 } : {});
    assertSame(k, n, line);
    assert.equal(k.entity, 'gpu:0000:b3:00', line);
    const sev = lookupReason(k.reason)?.severity;
    assert.ok(sev, `${k.reason} is a catalog reason`);
    assert.equal(sev === 'Fatal', DEFAULT_FATAL_XIDS.includes(code), `${line}: Fatal exactly for the fatal Xid list`);
    if (sev === 'Fatal') fatal++;
  }
  assert.equal(fatal, DEFAULT_FATAL_XIDS.length);
});

test('Xid 154: the recovery action decides, from the line (kernel log) or from field 230 (NVML), the same way', () => {
  const want: Record<number, string> = {
    0: 'NvidiaXID154Warning',
    1: 'NvidiaXID154Error', // GPU reset
    2: 'NvidiaXID154Error', // node reboot
    3: 'NvidiaXID154Warning', // drain P2P
    4: 'NvidiaXID154Error', // drain and reset
    5: 'NvidiaXID154Warning', // recover IMEX domain
  };
  for (const [to, reason] of Object.entries(want).map(([a, r]) => [Number(a), r] as const)) {
    const line = xid154(to, to === 0 ? 1 : 0);
    const k = viaKernelLog(line);
    assertSame(k, viaNvml(154, { recoveryAction: to }), line);
    assert.equal(k.reason, reason, line);
    assert.equal(k.attrs?.recoveryAction, to, line);
  }
  // With pid/name, and with only the name in parentheses: same decode.
  assert.equal(
    viaKernelLog(kernelLine(154, `pid='<unknown>', name=<unknown>, ${xid154(2).split(', ').pop()}`)).reason,
    'NvidiaXID154Error',
  );
  assert.equal(viaKernelLog(kernelLine(154, 'GPU recovery action changed from (None) to (Drain and Reset)')).attrs?.recoveryAction, 4);
  // No action readable on either side: the fatal list decides (154 is not in it).
  assertSame(viaKernelLog(kernelLine(154, 'GPU recovery action changed')), viaNvml(154, { recoveryAction: null }), 'no action');
  assert.equal(viaNvml(154).reason, 'NvidiaXID154Warning');
  // Configured fatal actions apply to both paths' decision.
  const drain = viaNvml(154, { recoveryAction: 3, config: { thresholds: { recoveryActionsFatal: [3] } } });
  assert.equal(drain.reason, 'NvidiaXID154Error');
  const [k] = new KernelLogClassifier({ recoveryActionsFatal: [3] }).classify({ message: xid154(3) }, T0);
  assertSame(k, drain, 'Drain P2P configured fatal');
});

test('NVLink5 Xids 144-150: the severity token decides; NVML carries none, so its events get the token-less decision', () => {
  for (let code = 144; code <= 150; code++) {
    assert.equal(viaKernelLog(nvlink5(code, 'Fatal')).reason, `NvidiaXID${code}Error`);
    assert.equal(viaKernelLog(nvlink5(code, 'fatal')).reason, `NvidiaXID${code}Error`);
    for (const nonfatal of ['Nonfatal', 'Non-fatal', 'NonFatal']) {
      assertSame(viaKernelLog(nvlink5(code, nonfatal)), viaNvml(code), `${code} ${nonfatal}`);
    }
    // A line whose token cannot be read says no more than the NVML event does.
    assertSame(viaKernelLog(kernelLine(code, 'Link 09 (0x025525c6 0x00000000)')), viaNvml(code), `${code} without a token`);
    assert.equal(viaNvml(code).reason, `NvidiaXID${code}Warning`);
  }
  // The real lines of §1.2.
  const f = viaKernelLog(
    'NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)',
  );
  assert.deepEqual([f.reason, f.entity, f.attrs?.nvlinkSeverity], ['NvidiaXID149Error', 'gpu:0019:01:00', 'Fatal']);
  const g = viaKernelLog(
    'NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)',
  );
  assert.deepEqual([g.reason, g.attrs?.nvlinkSeverity], ['NvidiaXID145Warning', 'Nonfatal']);
  // A fatal NVLink5 error is followed by Xid 154 with a reset action (§1.3 linkage): Fatal on both paths.
  assertSame(viaKernelLog(xid154(1)), viaNvml(154, { recoveryAction: 1 }), 'Xid 154 after a fatal NVLink5 error');
});

test('the token wins over the fatal list; without a token the list decides, on both paths', () => {
  const list = [...DEFAULT_FATAL_XIDS, 149];
  assert.equal(viaKernelLog(nvlink5(149, 'Nonfatal'), list).reason, 'NvidiaXID149Warning');
  assertSame(viaKernelLog(kernelLine(149, 'Link 09 (0x0)'), list), viaNvml(149, { config: { fatalXids: list } }), '149 listed');
  assert.equal(viaNvml(149, { config: { fatalXids: list } }).reason, 'NvidiaXID149Error');
  assertSame(viaKernelLog(kernelLine(13, TEXTS[0]), [13]), viaNvml(13, { config: { fatalXids: [13] } }), 'Xid 13 listed');
  assertSame(viaKernelLog(kernelLine(48, TEXTS[0]), []), viaNvml(48, { config: { fatalXids: [] } }), 'Xid 48 unlisted');
  assert.equal(viaNvml(48, { config: { fatalXids: [] } }).reason, 'NvidiaXID48Warning');
});

test('fallen off the bus: every text form is Xid 79 on the same GPU, as the NVML Xid 79 event is', () => {
  const nvml = viaNvml(79);
  assert.equal(nvml.reason, 'NvidiaXID79Error');
  for (const line of [
    'NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.',
    'NVRM: GPU at 0000:b3:00.0 has fallen off the bus.',
    'NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.',
    'NVRM: Xid (PCI:0000:b3:00): 79, pid=1234, name=python3, GPU has fallen off the bus.',
  ]) {
    assertSame(viaKernelLog(line), nvml, line);
  }
  // The multi-record form: the address arrives in the first record.
  const c = new KernelLogClassifier();
  assert.deepEqual(c.classify({ message: 'NVRM: The NVIDIA GPU 0000:b3:00.0' }, T0), []);
  assert.deepEqual(c.classify({ message: 'NVRM: (PCI ID: 10de:26b5) installed in this system has' }, T0 + 1), []);
  const [f] = c.classify({ message: 'NVRM: fallen off the bus and is not responding to commands.' }, T0 + 2);
  assertSame(f, nvml, 'multi-record fallen-off message');
  // Taken off the fatal list, the text forms follow the list as the Xid line does.
  assert.equal(viaKernelLog('NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.', []).reason, 'NvidiaXID79Warning');
});

test('a GPU that NVML knows only by index gets an index entity; one known by neither has none', () => {
  assert.equal(decideXid({ code: 48, pci: null, index: 5 }, { fatalXids: DEFAULT_FATAL_XIDS }).entity, 'gpu:nvml-index-5');
  assert.equal(decideXid({ code: 48, pci: null }, { fatalXids: DEFAULT_FATAL_XIDS }).entity, '');
  assert.equal(decideXid({ code: 48, pci: '00000000:B3:00.0', index: 5 }, { fatalXids: DEFAULT_FATAL_XIDS }).entity, 'gpu:0000:b3:00');
});

test('sub-decodes are read only for the Xids that carry them', () => {
  assert.deepEqual(xidDetailFromText(149, 'NETIR Fatal XC0'), { nvlinkSeverity: 'Fatal' });
  assert.deepEqual(xidDetailFromText(74, 'NVLink Fatal error'), {});
  assert.deepEqual(xidDetailFromText(154, 'GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)'), {
    recoveryAction: 2,
  });
  assert.deepEqual(xidDetailFromText(48, 'recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)'), {});
  assert.deepEqual(xidDetailFromText(154, 'GPU recovery action changed from 0x0 (None) to (Something New)'), {});
});
