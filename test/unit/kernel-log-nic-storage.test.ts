/**
 * Network interface and remote/volume storage rules (issue #24 section 1): what each wording
 * raises, on which entity, what it must not raise, and how a recovery line clears its problem
 * (through the classifier's healthy signal, live in the kernel-log monitor and in a replay).
 * Real lines with their sources are in test/fixtures/corpus/network-nic.yaml and
 * storage-remote-volume.yaml; the lines here are the drivers' format strings filled in, for
 * wordings no public log quoted.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Finding, FindingSink, HealthySignal } from '../../src/api/index.ts';
import { parseConfig } from '../../src/settings/index.ts';
import { KernelLogClassifier, KernelLogMonitor } from '../../src/monitors/index.ts';
import { createReplay } from '../../src/app/index.ts';
import type { KmsgIo } from '../../src/sources/index.ts';

function classify(message: string): { findings: Finding[]; healthy: HealthySignal[] } {
  const healthy: HealthySignal[] = [];
  const c = new KernelLogClassifier({ onHealthy: (h) => healthy.push(h) });
  return { findings: c.classify({ message }, 1_000), healthy };
}

function one(message: string): [string, string] | null {
  const { findings } = classify(message);
  assert.ok(findings.length <= 1, `${message}: ${findings.length} findings`);
  return findings[0] ? [findings[0].reason, findings[0].entity] : null;
}

test('transmit queue timeouts: per interface, or per PCI function before the netdev exists', () => {
  // mlx5e_tx_timeout_work (netdev_err on the netdev): "TX timeout on queue: %d, SQ: 0x%x, CQ: 0x%x, ...".
  assert.deepEqual(
    one(
      'mlx5_core 0000:3b:00.0 ens1f0: TX timeout on queue: 3, SQ: 0x10d, CQ: 0x44c, SQ Cons: 0x0 SQ Prod: 0x7, usecs since last trans: 14508000',
    ),
    ['NetworkTxTimeout', 'netif:ens1f0'],
  );
  assert.deepEqual(one('mlx5_core 0000:3b:00.0 ens1f0: TX timeout detected'), ['NetworkTxTimeout', 'netif:ens1f0']);
  // ice: "tx_timeout recovery level %d, txqueue %u" after the netdev name.
  assert.deepEqual(one('ice 0000:ca:00.0 ens5f0: tx_timeout recovery level 1, txqueue 12'), ['NetworkTxTimeout', 'netif:ens5f0']);
  assert.deepEqual(one('igb 0000:09:00.0: Detected Tx Unit Hang'), ['NetworkTxTimeout', 'pci:0000:09:00.0']);
  const { findings } = classify('NETDEV WATCHDOG: eth1 (ixgbe): transmit queue 5 timed out');
  assert.deepEqual(findings[0].attrs, { queue: 5, interface: 'eth1', driver: 'ixgbe' });
  // Statistics and link lines of the same drivers are not timeouts.
  for (const benign of [
    'ena 0000:00:05.0 eth0: tx_timeout: 0',
    'ena 0000:00:05.0 eth0: queue_3_tx_missed_tx: 0',
    'i40e 0000:08:00.1: eth9: NIC Link is Down',
    'mlx5_core 0000:3b:00.0 ens1f0: Link up',
  ])
    assert.equal(one(benign), null, benign);
});

test('NIC firmware health: mlx5 and ENA warnings, a failed recovery or probe fatal, other drivers untouched', () => {
  // health.c: poll_health and print_health_info.
  assert.deepEqual(one("mlx5_core 0000:41:00.0: poll_health:736:(pid 0): device's health compromised - reached miss count"), [
    'NetworkAdapterFirmwareError',
    'pci:0000:41:00.0',
  ]);
  assert.deepEqual(one('mlx5_core 0000:41:00.0: poll_health:751:(pid 0): Fatal error 1 detected'), [
    'NetworkAdapterFirmwareError',
    'pci:0000:41:00.0',
  ]);
  assert.deepEqual(one('mlx5_core 0000:41:00.0: print_health_info:423:(pid 0): synd 0x8: unrecoverable hardware error'), [
    'NetworkAdapterFirmwareError',
    'pci:0000:41:00.0',
  ]);
  // The health buffer's detail lines raise nothing more.
  assert.equal(one('mlx5_core 0000:41:00.0: print_health_info:410:(pid 0): assert_var[0] 0x00000001'), null);
  assert.equal(one('mlx5_core 0000:41:00.0: print_health_info:413:(pid 0): assert_exit_ptr 0x00a1b2c4'), null);
  assert.deepEqual(
    one('mlx5_core 0000:41:00.0: mlx5_health_try_recover:313:(pid 2021): health recovery flow aborted, PCI reads still not working'),
    ['NetworkAdapterFailed', 'pci:0000:41:00.0'],
  );
  assert.deepEqual(one('efa: probe of 0000:4f:00.0 failed with error -22'), ['NetworkAdapterFailed', 'pci:0000:4f:00.0']);
  assert.deepEqual(one('ena: probe of 0000:00:05.0 failed with error -110'), ['NetworkAdapterFailed', 'pci:0000:00:05.0']);
  // A probe failure of a driver that is not a NIC's, and another driver's "Fatal error", are not NIC faults.
  assert.equal(one('nouveau: probe of 0000:01:00.0 failed with error -22'), null);
  assert.equal(one('ahci 0000:00:17.0: Fatal error 3 detected'), null);
});

test('NFS, thin pools, btrfs and controllers: reasons and entities', () => {
  assert.deepEqual(one('nfs: server fs-1.example.com not responding, still trying'), ['NFSServerNotResponding', 'nfs:fs-1.example.com']);
  // lockd's own line is not the data path.
  assert.equal(one('lockd: server 10.0.0.2 not responding, still trying'), null);
  // dm-thin set_pool_mode: "%s: switching pool to %s mode".
  assert.deepEqual(one('device-mapper: thin: 253:4: switching pool to read-only mode'), ['ThinPoolReadOnly', 'dm:253:4']);
  assert.deepEqual(one('device-mapper: thin: 253:4: switching pool to fail mode'), ['ThinPoolReadOnly', 'dm:253:4']);
  // 3.x dm-thin names no pool: DMERR("switching pool to read-only mode").
  assert.deepEqual(one('device-mapper: thin: switching pool to read-only mode'), ['ThinPoolReadOnly', '']);
  assert.deepEqual(one('device-mapper: thin: 253:4: switching pool to out-of-data-space (queue IO) mode'), [
    'ThinPoolOutOfSpace',
    'dm:253:4',
  ]);
  assert.deepEqual(one('BTRFS error (device sdb): bdev /dev/sdc errs: wr 12, rd 0, flush 1, corrupt 0, gen 0'), [
    'BtrfsError',
    'blockdev:sdc',
  ]);
  assert.equal(one('BTRFS info (device sdb): scrub: finished on devid 1 with status: 0'), null);
  // btrfs_dev_stat_print_on_load: the lifetime counters, printed at mount.
  assert.equal(one('BTRFS info (device sdb): bdev /dev/sdc errs: wr 12, rd 0, flush 1, corrupt 0, gen 0'), null);
  // hpsa "controller lockup detected: 0x%08x after %d", megaraid_sas "Reset failed, killing adapter scsi%d.",
  // mpt3sas "diag reset: FAILED".
  assert.deepEqual(one('hpsa 0000:03:00.0: controller lockup detected: 0x00130000 after 30'), [
    'StorageControllerFailed',
    'pci:0000:03:00.0',
  ]);
  assert.deepEqual(one('megaraid_sas 0000:02:00.0: Reset failed, killing adapter scsi0.'), ['StorageControllerFailed', 'pci:0000:02:00.0']);
  assert.deepEqual(one('mpt3sas_cm1: diag reset: FAILED'), ['StorageControllerFailed', 'ioc:mpt3sas_cm1']);
  assert.deepEqual(one('mpt3sas_cm1: fault_state(0x2622)!'), ['StorageControllerReset', 'ioc:mpt3sas_cm1']);
  assert.equal(one('mpt3sas_cm1: diag reset: SUCCESS'), null);
});

test('a recovery line raises nothing and reports its entity healthy', () => {
  const ok = classify('nfs: server fs-1.example.com OK');
  assert.deepEqual(ok.findings, []);
  assert.deepEqual(
    ok.healthy.map((h) => [h.reasons, h.entity]),
    [[['NFSServerNotResponding'], 'nfs:fs-1.example.com']],
  );
  const write = classify('device-mapper: thin: 253:4: switching pool to write mode');
  assert.deepEqual(write.findings, []);
  assert.deepEqual(
    write.healthy.map((h) => [h.reasons, h.entity]),
    [[['ThinPoolOutOfSpace', 'ThinPoolReadOnly'], 'dm:253:4']],
  );
  // Without a listener the line is still no finding.
  assert.deepEqual(new KernelLogClassifier().classify({ message: 'nfs: server a OK' }, 1), []);
});

test('in a replay the OK line clears the NFS warning and write mode clears the fatal thin pool', () => {
  const r = createReplay({ config: parseConfig('{}'), rules: { userRules: [], npd: [] }, onFinding: () => {} });
  const storage = () => r.engine.health().conditions.find((c) => c.type === 'StorageReady')!;
  const active = () => r.engine.health().warnings.map((w) => `${w.reason} ${w.entity}`);
  r.push('[  100.000000] nfs: server 10.0.0.2 not responding, still trying\n');
  r.push('[  100.500000] nfs: server 10.0.0.9 not responding, still trying\n');
  assert.deepEqual(active(), ['NFSServerNotResponding nfs:10.0.0.2', 'NFSServerNotResponding nfs:10.0.0.9']);
  r.push('[  160.000000] nfs: server 10.0.0.2 OK\n');
  assert.deepEqual(active(), ['NFSServerNotResponding nfs:10.0.0.9'], 'only the server that answered again');
  r.push('[  200.000000] device-mapper: thin: 253:2: switching pool to read-only mode\n');
  assert.equal(storage().status, 'False');
  assert.equal(storage().reason, 'ThinPoolReadOnly');
  r.push('[  260.000000] device-mapper: thin: 253:7: switching pool to write mode\n');
  assert.equal(storage().status, 'False', 'another pool growing back clears nothing here');
  r.push('[  300.000000] device-mapper: thin: 253:2: switching pool to write mode\n');
  assert.equal(storage().status, 'True');
  r.end();
});

test('the kernel-log monitor passes a recovery line to its sink as a healthy signal', async () => {
  const records = ['3,1,1000000,-;nfs: server nas1 not responding, still trying\n', '6,2,2000000,-;nfs: server nas1 OK\n'];
  let i = 0;
  const io: KmsgIo = {
    open: () => 7,
    read: (_fd, buf) => {
      if (i >= records.length) throw Object.assign(new Error('EAGAIN'), { code: 'EAGAIN' });
      return buf.write(records[i++]);
    },
    close: () => {},
  };
  const findings: Finding[] = [];
  const healthy: HealthySignal[] = [];
  const out: FindingSink = { finding: (f) => findings.push(f), healthy: (h) => healthy.push(h), source: () => {} };
  const m = new KernelLogMonitor({
    reader: { io, bootId: 'b', uptimeMs: () => 10_000, now: () => 1e12, wait: 'interval' },
    now: () => 1e12,
  });
  m.start(out);
  await m.stop();
  assert.deepEqual(
    findings.map((f) => [f.reason, f.entity]),
    [['NFSServerNotResponding', 'nfs:nas1']],
  );
  assert.deepEqual(
    healthy.map((h) => [h.reasons, h.entity, h.source]),
    [[['NFSServerNotResponding'], 'nfs:nas1', 'kmsg']],
  );
});
