import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { KernelLogClassifier, BUILTIN_RULES, normalizeXidPci as normalizePci } from '../../src/monitors/index.ts';
import { lookupReason } from '../../src/catalog/index.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');
const fixture = (name: string) =>
  readFileSync(path.join(FIXTURES, name), 'utf8')
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'));

const T0 = 1_700_000_000_000;
const one = (message: string, c = new KernelLogClassifier()) => c.classify({ message }, T0);

test('every fault fixture raises exactly its reason and entity, and the reason is in the catalog', () => {
  const rows = fixture('faults.tsv').map((l) => l.split('\t') as [string, string, string]);
  assert.ok(rows.length >= 80);
  const seen = new Set<string>();
  for (const [reason, entity, message] of rows) {
    const f = one(message);
    assert.equal(f.length, 1, `one finding for: ${message}`);
    assert.equal(f[0].reason, reason, message);
    assert.equal(f[0].entity, entity, message);
    assert.equal(f[0].source, 'kmsg');
    assert.ok(lookupReason(reason), `${reason} is a catalog reason`);
    assert.ok(f[0].message.includes(message.replace(/\s*\n\s*/g, ' ').slice(0, 100)), 'the message quotes the log text');
    seen.add(reason.replace(/(XID|SXid)\d+/, '$1N'));
  }
  // Every built-in rule family has at least one fixture line.
  for (const r of [
    'NvidiaXIDNError',
    'NvidiaXIDNWarning',
    'NvidiaSXidNError',
    'NvidiaSXidNWarning',
    'NvidiaGPUInitFailed',
    'NvidiaGSPTimeout',
    'NvidiaNCCLError',
    'SoftLockup',
    'AppBlocked',
    'KernelBug',
    'AppCrash',
    'OOMKilling',
    'HardwareErrorFatal',
    'HardwareErrorCorrected',
    'PCIeUncorrectableError',
    'PCIeUncorrectableNonFatal',
    'PCIeCorrectedErrors',
    'ConntrackExceededKernel',
    'BlockDeviceIOError',
    'Ext4Error',
    'XFSShutdown',
    'FilesystemReadOnly',
  ]) {
    assert.ok(seen.has(r), `fixture for ${r}`);
  }
});

test('benign look-alikes raise nothing', () => {
  const c = new KernelLogClassifier();
  const nearMisses = [
    'NVRM: GPU at PCI:0000:01:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d',
    'NVRM: Xid (PCI:0000:01:00): abc, not a code',
    'nvidia-smi reports Xid errors: 0',
    'NVRM: The NVIDIA probe routine failed for 1 device(s).',
    'NVRM: RmInitAdapter: osInitNvMapping failed, bailing out of RmInitAdapter',
    'mlx5_core 0000:3b:00.0: poll_health: Heartbeat timed out',
    'nvidia-nvswitch0: SXid errors will be reported here',
    'systemd-coredump[999]: Process 1234 (python3) of user 0 dumped core.',
    'potentially unexpected fatal signal 11.',
    'pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5',
    'pcieport 0000:00:1c.5:   device [8086:9d15] error status/mask=00000001/00002000',
    'pcieport 0000:00:1c.5:    [ 0] RxErr                  (First)',
    'WARNING: CPU: 3 PID: 1 at kernel/sched/core.c:1234 update_rq_clock+0x1a/0x30',
    'x86/cpu: BUGS: spectre_v1 spectre_v2 spec_store_bypass',
    'DEBUG: driver probe complete',
    'Out of memory and no killable processes...',
    'EXT4-fs (sda1): mounted filesystem with ordered data mode. Opts: errors=remount-ro',
    'EXT4-fs (sda1): re-mounted. Opts: errors=remount-ro',
    'XFS (sda1): Please unmount the filesystem and rectify the problem(s)',
    'blk_update_request: I/O error, dev fd0, sector 0',
    'Buffer I/O error on dev loop3, logical block 0, async page read',
    'recoverable transport error, dev sdc, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0',
    '{1}[Hardware Error]: event severity: info',
    'nf_conntrack: falling back to vmalloc.',
  ];
  for (const l of [...fixture('benign.txt'), ...nearMisses]) assert.deepEqual(c.classify({ message: l }, T0), [], l);
});

test('Xid: attrs carry pci, xid, pid and process; <unknown> pid/name are left out', () => {
  const [f] = one(
    'NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005',
  );
  assert.deepEqual(f.attrs, { pci: '0000:cb:00', xid: 109, pid: 1797828, process: 'pt_main_thread' });
  const [g] = one("NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x52e7b0=0x101000e");
  assert.deepEqual(g.attrs, { pci: '0000:43:00', xid: 13 });
  assert.match(f.message, /^NVIDIA Xid 109 on GPU 0000:cb:00: NVRM: Xid/);
});

test('Xid: the fatal list is configurable', () => {
  const c = new KernelLogClassifier({ fatalXids: [13] });
  assert.equal(one('NVRM: Xid (PCI:0000:43:00): 13, Graphics Exception', c)[0].reason, 'NvidiaXID13Error');
  assert.equal(one('NVRM: Xid (PCI:0000:43:00): 48, DBE', c)[0].reason, 'NvidiaXID48Warning');
  // 63 is not in the default list (NVIDIA: IGNORE), unlike the EKS agent's.
  assert.equal(one('NVRM: Xid (PCI:0000:43:00): 63, Row remapping event')[0].reason, 'NvidiaXID63Warning');
});

test("Xid 144-150 follow the line's own Fatal/Nonfatal token, whatever the fatal list says", () => {
  const c = new KernelLogClassifier({ fatalXids: [145] });
  assert.equal(
    one('NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0 0x0 0x0 0x0 0x0 0x0)', c)[0].reason,
    'NvidiaXID145Warning',
  );
  assert.equal(one('NVRM: Xid (PCI:0018:01:00): 150, MSE  Fatal  XC1 i0 Link 2 (0x0 0x0 0x0 0x0 0x0 0x0)')[0].reason, 'NvidiaXID150Error');
  assert.equal(one('NVRM: Xid (PCI:0018:01:00): 144, something without a token')[0].reason, 'NvidiaXID144Warning');
});

test('GPU UUIDs learnt from "GPU at PCI" lines are attached to later findings for that GPU', () => {
  const c = new KernelLogClassifier();
  assert.deepEqual(c.classify({ message: 'NVRM: GPU at PCI:0000:01:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d' }, T0), []);
  const [f] = c.classify({ message: 'NVRM: Xid (PCI:0000:01:00): 31, Ch 0000003a, intr 10000000. MMU Fault' }, T0 + 1);
  assert.equal(f.attrs!.uuid, 'GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d');
  const [g] = c.classify({ message: 'NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:894)' }, T0 + 2);
  assert.equal(g.attrs!.uuid, 'GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d');
  assert.equal(c.gpuUuids().get('0000:01:00'), 'GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d');
  const [h] = c.classify({ message: 'NVRM: Xid (PCI:0000:02:00): 31, other GPU' }, T0 + 3);
  assert.equal(h.attrs!.uuid, undefined);
});

test('fallen off the bus: three records within the window join into one Xid 79 for the GPU', () => {
  const c = new KernelLogClassifier();
  assert.deepEqual(c.classify({ message: 'NVRM: The NVIDIA GPU 0000:b3:00.0' }, T0), []);
  assert.deepEqual(c.classify({ message: 'NVRM: (PCI ID: 10de:26b5) installed in this system has' }, T0 + 1), []);
  const f = c.classify({ message: 'NVRM: fallen off the bus and is not responding to commands.' }, T0 + 2);
  assert.equal(f.length, 1);
  assert.equal(f[0].reason, 'NvidiaXID79Error');
  assert.equal(f[0].entity, 'gpu:0000:b3:00');
  // A record after the window cannot say which GPU: still Fatal, on the node.
  const d = new KernelLogClassifier();
  d.classify({ message: 'NVRM: The NVIDIA GPU 0000:b3:00.0' }, T0);
  const late = d.classify({ message: 'NVRM: fallen off the bus and is not responding to commands.' }, T0 + 60_000);
  assert.equal(late[0].reason, 'NvidiaXID79Error');
  assert.equal(late[0].entity, '');
});

test('fallen off the bus: the same text as one record with embedded newlines', () => {
  const f = one(
    'NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.\n',
  );
  assert.equal(f.length, 1);
  assert.equal(f[0].entity, 'gpu:0000:b3:00');
  assert.ok(!f[0].message.includes('\n'), 'the finding message is one line');
  // "not supported by this driver" starts the same way: the driver refused the GPU, not Xid 79.
  const unsupported = one(
    'NVRM: The NVIDIA GPU 0000:01:00.0\nNVRM: (PCI ID: 10de:1b80) installed in this system is\nNVRM: not supported by the NVIDIA 390.xx driver release.',
  );
  assert.deepEqual(
    unsupported.map((x) => [x.reason, x.entity]),
    [['NvidiaGPUUnsupported', 'gpu:0000:01:00']],
  );
});

test('fallen off the bus and Xid 79 for the same GPU are reported once, in either order', () => {
  const multi =
    'NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.';
  const xid = 'NVRM: Xid (PCI:0000:b3:00): 79, pid=1234, name=python3, GPU has fallen off the bus.';
  const a = new KernelLogClassifier();
  assert.equal(a.classify({ message: multi }, T0).length, 1);
  assert.equal(a.classify({ message: xid }, T0 + 1000).length, 0);
  const b = new KernelLogClassifier();
  assert.equal(b.classify({ message: xid }, T0).length, 1);
  assert.equal(b.classify({ message: multi }, T0 + 1000).length, 0);
  assert.equal(b.classify({ message: 'NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.' }, T0 + 2000).length, 0);
  // Another GPU is another fault; the same GPU after the window is reported again.
  assert.equal(b.classify({ message: xid.replace('b3:00', 'b4:00') }, T0 + 3000).length, 1);
  assert.equal(b.classify({ message: xid }, T0 + 6 * 60_000).length, 1);
});

test('a libnccl segfault is NvidiaNCCLError only, not also AppCrash', () => {
  const f = one(
    'pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]',
  );
  assert.deepEqual(
    f.map((x) => x.reason),
    ['NvidiaNCCLError'],
  );
  assert.deepEqual(f[0].attrs, { process: 'pt_main_thread', pid: 2536443 });
});

test('rules written to stay linear on hostile lines still read what they did: NCCL traps, OOM summary, XFS shutdown, hung task', () => {
  const pick = (message: string) => one(message).map((f) => ({ reason: f.reason, entity: f.entity, attrs: f.attrs }));
  assert.deepEqual(pick('traps: python3[77] general protection fault ip:7f00 sp:7ffd error:0 in libnccl.so.2.18.3[7f00+1000]'), [
    { reason: 'NvidiaNCCLError', entity: '', attrs: { process: 'python3', pid: 77 } },
  ]);
  // The words in the wrong order, or the library named some other way, are not a crash in it.
  assert.deepEqual(pick('libnccl.so.2 loaded; traps: none'), []);
  assert.deepEqual(
    pick('python3[77]: segfault at 0 ip 0 sp 0 error 4 in libfoo.so (libnccl next)').map((f) => f.reason),
    ['AppCrash'],
  );
  assert.deepEqual(
    pick(
      'oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=a.scope,mems_allowed=0-1,task_memcg=/kubepods.slice/x,task=pt_main_thread,pid=461754,uid=0',
    ),
    [{ reason: 'OOMKilling', entity: '', attrs: { pid: 461754, process: 'pt_main_thread', cgroup: true } }],
  );
  assert.deepEqual(pick('XFS (dm-0): Corruption of in-memory data detected.  Shutting down filesystem')[0].entity, 'blockdev:dm-0');
  // The device is the one before the words: "XFS (x): " after them names no shutdown of x.
  assert.deepEqual(
    pick('Filesystem "dm-0": I/O Error Detected.  Shutting down filesystem: dm-0 XFS (sdz): noted').map((f) => f.entity),
    ['blockdev:dm-0'],
  );
  assert.deepEqual(pick('INFO: task kworker/u16:3:4567 blocked for more than 245 seconds.')[0].attrs, {
    process: 'kworker/u16:3',
    pid: 4567,
    seconds: 245,
  });
});

test('PCIe AER: device entity, gpuAbove attribution, corrected-error threshold', () => {
  const gpuAbove = (bdf: string) => (bdf === '0000:00:1c.5' ? '0000:b3:00' : undefined);
  const c = new KernelLogClassifier({ gpuAbove, pcieCorrectedThreshold: { count: 5, windowMs: 60_000 } });
  const [f] = c.classify(
    { message: 'pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)' },
    T0,
  );
  assert.equal(f.entity, 'pci:0000:00:1c.5');
  assert.deepEqual(f.attrs, {
    device: '0000:00:1c.5',
    severity: 'Corrected',
    driver: 'pcieport',
    type: 'Physical Layer',
    gpu: '0000:b3:00',
  });
  assert.deepEqual(f.threshold, { count: 5, windowMs: 60_000 });
  assert.match(f.message, /above GPU 0000:b3:00/);
  // Default threshold: 20 per hour; uncorrectable errors have none.
  assert.deepEqual(
    one('pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e5(Receiver ID)')[0].threshold,
    { count: 20, windowMs: 3_600_000 },
  );
  assert.equal(
    one('pcieport 0000:00:01.1: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)')[0].threshold,
    undefined,
  );
});

test('block devices: fd, sr and loop are ignored by default; the list is configurable', () => {
  assert.deepEqual(one('Buffer I/O error on dev sr0, logical block 0, async page read'), []);
  const c = new KernelLogClassifier({ ignoredBlockDevices: /^nvme1n1$/ });
  assert.deepEqual(one('blk_update_request: I/O error, dev nvme1n1, sector 1234567', c), []);
  assert.equal(one('Buffer I/O error on dev sr0, logical block 0, async page read', c)[0].entity, 'blockdev:sr0');
});

test('finding messages are one line and cut to 512 characters of log text', () => {
  const long = `NVRM: Xid (PCI:0000:01:00): 13, ${'x'.repeat(5000)}`;
  const [f] = one(long);
  assert.ok(f.message.length < 512 + 80);
  assert.ok(f.message.endsWith('...'));
  const c = new KernelLogClassifier({ maxMessageChars: 40 });
  assert.ok(one(long, c)[0].message.length < 40 + 80);
});

test('normalizePci', () => {
  assert.equal(normalizePci('PCI:0000:B3:00.0'), '0000:b3:00');
  assert.equal(normalizePci('00000000:B3:00.0'), '0000:b3:00');
  assert.equal(normalizePci('0000:b3:00'), '0000:b3:00');
  assert.equal(normalizePci('b3:00.0'), '0000:b3:00');
  assert.equal(normalizePci('0018:01:00'), '0018:01:00');
});

test('every built-in rule names keywords that its fixture lines contain (the prefilter cannot hide a rule)', () => {
  for (const r of BUILTIN_RULES) assert.ok(r.keywords.length > 0, r.name);
  for (const l of fixture('faults.tsv')) {
    const msg = l.split('\t')[2];
    assert.ok(
      BUILTIN_RULES.some((r) => r.keywords.some((k) => msg.includes(k))),
      msg,
    );
  }
});

test('RCU stalls: one problem per CPU the report names, the header on the node when it names none', () => {
  const got = (c: KernelLogClassifier, message: string, at = T0) => c.classify({ message }, at).map((f) => `${f.reason}@${f.entity}`);
  const c = new KernelLogClassifier();
  // 6.x self-detected: the header names no CPU, the detail line after it does.
  assert.deepEqual(got(c, 'rcu: INFO: rcu_preempt self-detected stall on CPU'), ['RCUStall@']);
  assert.deepEqual(got(c, 'rcu: \t0-....: (1 GPs behind) idle=3514/0/0x3 softirq=671080/671080 fqs=3762'), ['RCUStall@cpu:0']);
  assert.deepEqual(got(c, 'rcu: \t(t=21002 jiffies g=1292137 q=85 ncpus=2)'), []);
  // 3.x/4.x: the CPU in braces or after "CPU"; expedited "{ 0-... }"; a preempted task "{ P392 }" is no CPU.
  assert.deepEqual(got(c, 'INFO: rcu_sched_state detected stalls on CPUs/tasks: { 2} (detected by 7, t=15002 jiffies)'), [
    'RCUStall@cpu:2',
  ]);
  assert.deepEqual(got(c, 'INFO: rcu_sched_state detected stall on CPU 7 (t=15000 jiffies)'), ['RCUStall@cpu:7']);
  assert.deepEqual(got(c, 'rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { 0-... } 6 jiffies s: 85 root: 0x1/.'), [
    'RCUStall@cpu:0',
  ]);
  assert.deepEqual(got(c, 'rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { P392 } 21382 jiffies s: 117 root: 0x0/T'), [
    'RCUStall@',
  ]);
  const [two] = c.classify({ message: 'INFO: rcu_sched detected stalls on CPUs/tasks: { 2 5} (detected by 7, t=15002 jiffies)' }, T0);
  assert.equal(two.entity, '');
  assert.equal(two.attrs?.cpus, '2,5');
  // The rest of the report, and RCU's boot lines, raise nothing.
  for (const benign of [
    'rcu: rcu_sched kthread starved for 38227 jiffies! g-1127 f0x0 RCU_GP_WAIT_FQS(5) ->state=0x402 ->cpu=1',
    'rcu: \t(detected by 0, t=38227 jiffies, g=-1127, q=10)',
    'rcu: Hierarchical RCU implementation.',
    'rcu: RCU calculated value of scheduler-enlistment delay is 25 jiffies.',
    'Kernel command line: BOOT_IMAGE=/vmlinuz idle=poll',
  ])
    assert.deepEqual(got(c, benign), [], benign);
});

test('a GPU the driver never brings up is fatal; the probe-failed summary is not', () => {
  const got = (c: KernelLogClassifier, message: string, at = T0) => c.classify({ message }, at).map((f) => `${f.reason}@${f.entity}`);
  const c = new KernelLogClassifier();
  assert.deepEqual(got(c, 'NVRM: The NVIDIA probe routine was not called for 3 device(s).'), ['NvidiaGPUNotProbed@']);
  assert.deepEqual(got(c, 'NVRM: No NVIDIA graphics adapter probed!'), ['NvidiaGPUNotProbed@']);
  assert.deepEqual(got(c, 'NVRM: None of the NVIDIA devices were initialized.'), ['NvidiaGPUNotProbed@']);
  assert.deepEqual(got(c, 'NVRM: The NVIDIA probe routine failed for 1 device(s).'), []);
  assert.equal(lookupReason('NvidiaGPUNotProbed')?.severity, 'Fatal');
  assert.equal(lookupReason('NvidiaGPUNotProbed')?.condition, 'AcceleratedHardwareReady');
  // Open nvidia.ko refusing a GPU without GSP: records joined within the window name the GPU.
  assert.deepEqual(got(c, 'NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1b82)', T0), []);
  assert.deepEqual(got(c, 'NVRM: installed in this system is not supported by open', T0 + 1), ['NvidiaGPUUnsupported@gpu:0000:02:00']);
  assert.deepEqual(got(c, 'NVRM: nvidia.ko because it does not include the required GPU', T0 + 2), []);
  assert.deepEqual(got(c, 'NVRM: System Processor (GSP).', T0 + 3), []);
  assert.equal(lookupReason('NvidiaGPUUnsupported')?.severity, 'Fatal');
});

test('GSP calls failing with NV_ERR_RESET_REQUIRED raise NvidiaGPUResetRequired; NV_ERR_TIMEOUT from a GSP call is a GSP timeout', () => {
  const got = (message: string) => one(message).map((f) => `${f.reason}@${f.entity}`);
  assert.deepEqual(
    got(
      'NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; hParent=0x5c000054; hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; paramsStatus=0x00000062; status=0x00000062',
    ),
    ['NvidiaGPUResetRequired@'],
  );
  assert.deepEqual(
    got('nvidia-modeset: ERROR: GPU:0: Failed to initialize display engine: 0x62 (Reset required [NV_ERR_RESET_REQUIRED])'),
    ['NvidiaGPUResetRequired@'],
  );
  // Another status in the same shape is not a reset.
  assert.deepEqual(
    got(
      'NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; hParent=0x5c000054; hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; paramsStatus=0x00000051; status=0x00000051',
    ),
    [],
  );
  assert.deepEqual(
    got(
      'NVRM: GPU0 nvCheckOkFailedNoLog: Check failed: Call timed out [NV_ERR_TIMEOUT] (0x00000065) returned from kgspWaitForGfwBootOk_HAL(pGpu, pKernelGsp) @ kernel_gsp.c:4945',
    ),
    ['NvidiaGSPTimeout@'],
  );
  assert.deepEqual(
    got('NVRM: nvAssertFailedNoLog: Assertion failed: Back to back GSP RPC timeout detected! GPU marked for reset @ kernel_gsp.c:2387'),
    ['NvidiaGSPTimeout@'],
  );
  // A timeout in a call that is no GSP RPC (a cache flush) says nothing about the GSP.
  assert.deepEqual(
    got(
      'NVRM: nvAssertOkFailedNoLog: Assertion failed: Call timed out [NV_ERR_TIMEOUT] (0x00000065) returned from kmemsysCacheOp_HAL(pGpu, pKernelMemorySystem, NULL, FB_CACHE_SYSTEM_MEMORY, FB_CACHE_INVALIDATE) @ mem_desc.c:1512',
    ),
    [],
  );
  // An internal control (sent to the GSP through the GPU's internal handles) timing out is a GSP timeout.
  assert.deepEqual(
    got(
      'NVRM: nvCheckOkFailedNoLog: Check failed: Call timed out [NV_ERR_TIMEOUT] (0x00000065) returned from pRmApi->Control(pRmApi, pGpu->hInternalClient, pGpu->hInternalSubdevice, NV2080_CTRL_CMD_INTERNAL_LOG_OOB_XID, &params, sizeof(params)) @ gpu.c:6468',
    ),
    ['NvidiaGSPTimeout@'],
  );
  // The status alone: a control forwarded to the GSP failing with 0x65 is a timeout, with another code it is not.
  assert.deepEqual(
    got('NVRM: subdeviceCtrlCmdMcServiceInterrupts_IMPL: NVRM_RPC: NV2080_CTRL_CMD_MC_SERVICE_INTERRUPTS failed with error 0x65'),
    ['NvidiaGSPTimeout@'],
  );
  assert.deepEqual(
    got('NVRM: subdeviceCtrlCmdMcServiceInterrupts_IMPL: NVRM_RPC: NV2080_CTRL_CMD_MC_SERVICE_INTERRUPTS failed with error 0x56'),
    [],
  );
  assert.deepEqual(
    got('NVRM: subdeviceCtrlCmdMcServiceInterrupts_IMPL: NVRM_RPC: NV2080_CTRL_CMD_MC_SERVICE_INTERRUPTS failed with error 0x651'),
    [],
  );
  // The driver's note once RPC timeouts pass its reset threshold: one problem for the node, the GPU in attrs.
  const rate = one(
    'NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:0a:00 (printing 1 of every 30).  The GPU likely needs to be reset.',
  );
  assert.deepEqual(
    rate.map((f) => [f.reason, f.entity, f.attrs?.pci]),
    [['NvidiaGSPTimeout', '', '0000:0a:00']],
  );
});

test('warm() keeps nothing: the same Xid 79 right after it is still a finding, and no GPU is learnt', () => {
  const c = new KernelLogClassifier();
  const line = 'NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=x, GPU has fallen off the bus.';
  c.warm([line, 'NVRM: GPU at PCI:0000:3b:00: GPU-5d6c6a42-0000-0000-0000-000000000000']);
  assert.deepEqual(
    one(line, c).map((f) => [f.reason, f.entity]),
    [['NvidiaXID79Error', 'gpu:0000:3b:00']],
  );
  assert.equal(c.gpuUuids().size, 0);
});
