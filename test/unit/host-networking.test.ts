import { test } from 'node:test';
import assert from 'node:assert/strict';
import { networkingChecks, networkingConfigSchema, parseEthtoolStats } from '../../src/monitors/index.ts';
import { check, cleared, ctx, fakeExec, found, fx } from './host-helpers.ts';

const cfg = networkingConfigSchema.parse({});

test('interfaces: healthy tree; admin-down and excluded interfaces are not judged', async () => {
  const c = check(networkingChecks(cfg), 'networking.interfaces');
  const r = await c.run(ctx(fx('healthy')));
  assert.deepEqual(found(r), []);
  assert.deepEqual(cleared(r), [
    'InterfaceNotRunning netif:eth0',
    'InterfaceNotRunning netif:eth1',
    'InterfaceNotRunning netif:lo',
    'InterfaceNotUp netif:eth0',
    'InterfaceNotUp netif:eth1',
    'InterfaceNotUp netif:lo',
    'MissingLoopbackInterface',
  ]);
});

test('interfaces: no carrier / not running reported on the second consecutive poll; missing loopback at once', async () => {
  const c = check(networkingChecks(cfg), 'networking.interfaces');
  const first = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(first), ['MissingLoopbackInterface']);
  const second = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(second), ['InterfaceNotRunning netif:eth2', 'InterfaceNotUp netif:eth0', 'MissingLoopbackInterface']);
  assert.match(second.findings.find((f) => f.entity === 'netif:eth0')!.message, /no carrier/);
  // A flap between polls restarts the count.
  await c.run(ctx(fx('healthy')));
  assert.deepEqual(found(await c.run(ctx(fx('faulty')))), ['MissingLoopbackInterface']);
});

test('interfaces: the exclusion list is configurable', async () => {
  const c = check(
    networkingChecks(networkingConfigSchema.parse({ excludedInterfaces: ['^eth2$'], consecutivePolls: 1 })),
    'networking.interfaces',
  );
  assert.deepEqual(found(await c.run(ctx(fx('faulty')))), ['InterfaceNotUp netif:eth0', 'MissingLoopbackInterface']);
});

test('sysctl: ip_forward and conntrack fill', async () => {
  const c = check(networkingChecks(cfg), 'networking.sysctl');
  assert.deepEqual(cleared(await c.run(ctx(fx('healthy')))), ['ConntrackExceeded', 'NetworkSysctl']);
  const bad = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(bad), ['ConntrackExceeded', 'NetworkSysctl']);
  assert.equal(bad.findings.find((f) => f.reason === 'ConntrackExceeded')!.source, 'procfs');
  assert.equal((await c.run(ctx(fx('empty')))).status, 'skipped');
});

test('ena: ethtool -S only for ENA interfaces; allowance counters through token buckets', async () => {
  const at = { root: fx('healthy') };
  const calls: string[][] = [];
  const c = check(networkingChecks(cfg, { exec: fakeExec(at, calls) }), 'networking.ena');
  const t0 = 1_700_000_000_000;
  const base = await c.run(ctx(at.root, t0));
  assert.deepEqual([found(base), cleared(base)], [[], []], 'first sample is a baseline');
  assert.deepEqual(calls, [
    ['ethtool', '-S', 'eth0'],
    ['ethtool', '-S', 'eth1'],
  ]);
  at.root = fx('healthy-later');
  const ok = await c.run(ctx(at.root, t0 + 300_000)); // bw_in +10 is within its burst of 180
  assert.deepEqual(found(ok), []);
  assert.equal(cleared(ok).length, 5);
  at.root = fx('faulty');
  calls.length = 0;
  const bad = await c.run(ctx(at.root, t0 + 600_000));
  assert.deepEqual(
    calls,
    [
      ['ethtool', '-S', 'eth0'],
      ['ethtool', '-S', 'eth1'],
    ],
    'eth2 (virtio_net) is never spawned for',
  );
  assert.deepEqual(found(bad), ['BandwidthInExceeded netif:eth0', 'LinkLocalExceeded netif:eth0', 'PPSExceeded netif:eth0']);
  assert.ok(bad.findings.every((f) => f.source === 'exec'));
  assert.equal((await c.run(ctx(fx('empty')))).status, 'skipped');
});

test('parseEthtoolStats', () => {
  assert.deepEqual(parseEthtoolStats('NIC statistics:\n     tx_timeout: 0\n     queue_0_tx_cnt: 12\n     pps_allowance_exceeded: 7\n'), {
    tx_timeout: 0,
    queue_0_tx_cnt: 12,
    pps_allowance_exceeded: 7,
  });
});

test('rdma: port state and error counter growth', async () => {
  const c = check(networkingChecks(cfg), 'networking.rdma');
  const base = await c.run(ctx(fx('healthy')));
  assert.deepEqual(cleared(base), ['RDMAPortDown netif:mlx5_0/1'], 'counters need a second sample');
  assert.deepEqual(cleared(await c.run(ctx(fx('healthy-later')))), ['RDMAPortDown netif:mlx5_0/1', 'RDMAPortErrors netif:mlx5_0/1']);
  const bad = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(bad), ['RDMAPortErrors netif:mlx5_0/1'], 'link_downed +5; symbol_error +3 is under its 10');
  assert.match(bad.findings[0].message, /link_downed \+5/);
  const bad2 = await c.run(ctx(fx('faulty')));
  assert.deepEqual(found(bad2), ['RDMAPortDown netif:mlx5_0/1']);
  assert.deepEqual(cleared(bad2), ['RDMAPortErrors netif:mlx5_0/1']);
  assert.equal((await c.run(ctx(fx('empty')))).status, 'skipped');
  const excluded = check(networkingChecks(networkingConfigSchema.parse({ rdma: { excludedPorts: ['^mlx5_0/'] } })), 'networking.rdma');
  assert.equal((await excluded.run(ctx(fx('faulty')))).status, 'skipped');
});

test('dns: API server name from config, service env or kubelet kubeconfig; IPs are skipped', async () => {
  const asked: string[] = [];
  const failing = (host: string) => Promise.resolve((asked.push(host), 'ENOTFOUND'));
  const c = check(networkingChecks(cfg, { lookup: failing, env: { KUBERNETES_SERVICE_HOST: '10.100.0.1' } }), 'networking.dns');
  const bad = await c.run(ctx(fx('healthy')));
  assert.deepEqual(found(bad), ['DNSResolutionFailed']);
  assert.deepEqual(
    asked,
    ['abcdef.gr7.us-west-2.eks.amazonaws.com', 'abcdef.gr7.us-west-2.eks.amazonaws.com'],
    'kubeconfig server (URL lower-cases it), two attempts',
  );
  const byEnv = check(
    networkingChecks(cfg, { lookup: () => Promise.resolve(undefined), env: { KUBERNETES_SERVICE_HOST: 'api.example.internal' } }),
    'networking.dns',
  );
  assert.deepEqual(cleared(await byEnv.run(ctx(fx('empty')))), ['DNSResolutionFailed']);
  const none = check(networkingChecks(cfg, { lookup: failing, env: {} }), 'networking.dns');
  assert.equal((await none.run(ctx(fx('empty')))).status, 'skipped');
  const configured = check(networkingChecks(networkingConfigSchema.parse({ dns: { host: 'localhost' } }), { env: {} }), 'networking.dns');
  assert.deepEqual(cleared(await configured.run(ctx(fx('empty')))), ['DNSResolutionFailed'], 'real lookup of localhost');
});
