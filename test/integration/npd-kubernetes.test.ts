/**
 * NPD configurations mean what they mean in NPD: the real `vigil run`, loading NPD's stock
 * kernel-monitor.json and readonly-monitor.json with --npd-config, reads NPD's documented example
 * lines (test/kernel_log_generator/problems/ upstream) from the real /dev/kmsg and reports them to a
 * real kube-apiserver as NPD does: each declared condition False with its default reason while
 * healthy, True with the permanent rule's reason once it fires; temporary rules as Warning Events
 * with the rule's reason.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { kernelLogOnlyConfig, startAgent, writeKmsg } from '../helpers/agent-process.ts';
import { conditionsOf, eventsFor, startCluster, waitFor, type TestCluster } from '../helpers/cluster.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'kmsg');

let cluster: TestCluster;
let dir: string;
before(async () => {
  cluster = await startCluster();
  dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-npd-'));
});
after(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("NPD's stock kernel monitor: conditions and Events on the Node exactly as NPD reports them", { timeout: 240_000 }, async (t) => {
  const node = 'npd-stock';
  await cluster.createNode(node);
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(config, kernelLogOnlyConfig(['kubernetes:', '  mode: "on"', '  coalesce: 100ms']));
  const agent = await startAgent([
    '--kubeconfig',
    cluster.vigilKubeconfig,
    '--node-name',
    node,
    '--state-dir',
    path.join(dir, 'state'),
    '--config',
    config,
    '--npd-config',
    path.join(FIXTURES, 'npd-kernel-monitor.json'),
    '--npd-config',
    path.join(FIXTURES, 'npd-readonly-monitor.json'),
  ]);
  t.after(async () => {
    await agent.stop();
  });
  const cond = async (type: string) => conditionsOf(await cluster.readNode(node)).get(type);

  // Healthy: every declared condition False with the file's default reason and message.
  const healthy: [string, string, string][] = [
    ['KernelDeadlock', 'KernelHasNoDeadlock', 'kernel has no deadlock'],
    ['XfsShutdown', 'XfsHasNotShutDown', 'XFS has not shutdown'],
    ['CperHardwareErrorFatal', 'CperHardwareHasNoFatalError', 'UEFI CPER has no fatal error'],
    ['ReadonlyFilesystem', 'FilesystemIsNotReadOnly', 'Filesystem is not read-only'],
  ];
  await waitFor('the NPD conditions on the Node', async () => (await cond('ReadonlyFilesystem')) !== undefined, 30_000);
  for (const [type, reason, message] of healthy) {
    const c = await cond(type);
    assert.deepEqual([c?.status, c?.reason, c?.message], ['False', reason, message], type);
  }
  assert.equal((await cond('KernelReady'))?.status, 'True', "Vigil's own condition keeps True = healthy");

  const token = randomBytes(5).toString('hex');
  // Temporary rules: Warning Events with the rule's reason, no condition change.
  const oom = `Killed process 1012 (heapster${token}) total-vm:327128kB, anon-rss:306328kB, file-rss:11132kB, shmem-rss:12345kB`;
  writeKmsg(`Memory cgroup out of memory: Kill process 1012 (heapster${token}) score 1035 or sacrifice child`);
  writeKmsg(oom);
  const oops = `BUG: unable to handle kernel NULL pointer dereference at ${token}`;
  writeKmsg(oops);
  // docker_hung: TaskHung (temporary) and DockerHung (permanent, KernelDeadlock) from one line.
  const hung = `INFO: task docker:${token} blocked for more than 120 seconds.`;
  writeKmsg(hung);

  const deadlock = await waitFor(
    'KernelDeadlock=True',
    async () => {
      const c = await cond('KernelDeadlock');
      return c?.status === 'True' && c.message?.includes(token) && c;
    },
    30_000,
  );
  assert.equal(deadlock.reason, 'DockerHung');
  assert.ok(deadlock.message!.includes(hung), deadlock.message);

  const event = (reason: string, text: string) =>
    waitFor(
      `a ${reason} Event`,
      async () => (await eventsFor(cluster, node)).find((e) => e.reason === reason && e.note?.includes(text)),
      30_000,
    );
  for (const [reason, text] of [
    // One kill, two lines: Vigil's built-in rule already reports it from the first ("Kill process"),
    // and the engine keeps one kill as one finding, so the Event names the process, not this line.
    ['OOMKilling', `heapster${token}`],
    ['KernelOops', oops],
    ['TaskHung', hung],
  ]) {
    const e = await event(reason, text);
    assert.equal(e.type, 'Warning', reason);
  }
  // The condition change is told as an Event too, with the problem's reason, as NPD does.
  await event('DockerHung', token);
  for (const [type, reason] of [
    ['XfsShutdown', 'XfsHasNotShutDown'],
    ['CperHardwareErrorFatal', 'CperHardwareHasNoFatalError'],
    ['ReadonlyFilesystem', 'FilesystemIsNotReadOnly'],
  ]) {
    const c = await cond(type);
    assert.deepEqual([c?.status, c?.reason], ['False', reason], `${type} untouched by the other rules`);
  }

  // The other permanent rules, each with NPD's documented line.
  const permanent: [string, string, string][] = [
    ['ReadonlyFilesystem', 'FilesystemIsReadOnly', `EXT4-fs (sd${token}): Remounting filesystem read-only`],
    ['XfsShutdown', 'XfsHasShutdown', `XFS (dm-${token}): Corruption of in-memory data detected.  Shutting down filesystem`],
    ['CperHardwareErrorFatal', 'CperHardwareErrorFatal', `${token} {1}[Hardware Error]: event severity: fatal`],
  ];
  for (const [, , line] of permanent) writeKmsg(line);
  for (const [type, reason, line] of permanent) {
    const c = await waitFor(
      `${type}=True`,
      async () => {
        const x = await cond(type);
        return x?.status === 'True' && x.message?.includes(token) && x;
      },
      30_000,
    );
    assert.equal(c.reason, reason, type);
    assert.ok(c.message!.includes(line), c.message);
  }
  assert.equal(agent.lines.filter((l) => l.event === 'kubernetes' && typeof l.status === 'number').length, 0, 'no API errors logged');
});
