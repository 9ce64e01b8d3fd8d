/**
 * The chart's pod on a real node, installed as an operator installs it: the image and chart are
 * published to a local OCI registry (test/deploy/publish.sh), the README's install command runs with
 * only the registry changed, the real scheduler places the DaemonSet pod on the real Node
 * (kubelet + containerd + runc, test/cluster/up.sh --with-node), containerd pulls the image from the
 * registry (ghcr.io is mapped to it on the node), and the pod reports through its projected token
 * with the admission policy in force. Then the life cycle: a fault through the pod, upgrade, a
 * container killed from outside, a bundle fetched through the node proxy, uninstall, and an
 * unprivileged install that the device cgroup keeps from /dev/kmsg.
 *
 * One node cluster for the file; the tests run in order and build on each other.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { uniquePci, writeKmsg } from '../helpers/agent-process.ts';
import { startNodeCluster, type NodeCluster } from '../helpers/node-cluster.ts';
import { KUBECTL, ROOT } from './tools.ts';
import {
  STATE_HOST_PATH,
  claimStateDir,
  helmOk,
  helmOn,
  installArgs,
  publish,
  releaseStateDir,
  stateFiles,
  type Published,
} from './pod-install.ts';

const NS = 'vigil';
const RELEASE = 'vigil';
const SELECTOR = 'app.kubernetes.io/name=vigil,app.kubernetes.io/instance=vigil';
const isRoot = process.getuid?.() === 0;
const tools = spawnSync('sh', ['-c', 'command -v podman && command -v containerd && command -v runc'], { encoding: 'utf8' }).status === 0;
const skip = !isRoot ? 'needs root (a kubelet, /dev/kmsg)' : !tools ? 'podman, containerd or runc missing (.ci/run installs them)' : false;

let cluster: NodeCluster;
let published: Published;
let core: k8s.CoreV1Api;
let apps: k8s.AppsV1Api;
let work: string;
/** The pod of each step, for the next to compare against. */
let pod: k8s.V1Pod;
let fatal: { pci: string; lastTransitionTime: string };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false | null>, timeoutMs: number, everyMs = 500): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`,
      );
    }
    await sleep(everyMs);
  }
}

function kubectl(args: string[], env: NodeJS.ProcessEnv = {}): { code: number | null; out: string; err: string } {
  const r = spawnSync(KUBECTL, ['--kubeconfig', cluster.adminKubeconfig, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
    maxBuffer: 64 << 20,
    env: { ...process.env, ...env },
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function kubectlOk(args: string[], env?: NodeJS.ProcessEnv): string {
  const r = kubectl(args, env);
  assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.err}`);
  return r.out;
}

/** `kubectl vigil ARGS` with bin/ on the PATH, as an operator's plugin (kubectl takes no flag before a plugin's name). */
function plugin(args: string[]): string {
  const r = spawnSync(KUBECTL, ['vigil', ...args, '--kubeconfig', cluster.adminKubeconfig], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, PATH: `${path.join(ROOT, 'bin')}:${process.env.PATH}` },
  });
  assert.equal(r.status, 0, `kubectl vigil ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

async function pods(): Promise<k8s.V1Pod[]> {
  return (await core.listNamespacedPod({ namespace: NS, labelSelector: SELECTOR })).items.filter((p) => !p.metadata?.deletionTimestamp);
}

const ready = (p: k8s.V1Pod) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** The one live pod of the release once `pred` holds for it. */
function onePod(what: string, pred: (p: k8s.V1Pod) => boolean, timeoutMs = 300_000): Promise<k8s.V1Pod> {
  return waitFor(
    what,
    async () => {
      const live = await pods();
      return live.length === 1 && pred(live[0]) ? live[0] : undefined;
    },
    timeoutMs,
  );
}

async function node(): Promise<k8s.V1Node> {
  return core.readNode({ name: cluster.nodeName });
}

async function condition(type: string): Promise<k8s.V1NodeCondition | undefined> {
  return (await node()).status?.conditions?.find((c) => c.type === type);
}

const iso = (t: Date | string | undefined) => (t === undefined ? undefined : new Date(t).toISOString());

function podLogs(p: k8s.V1Pod, previous = false): string {
  return kubectlOk(['logs', '-n', NS, p.metadata!.name!, ...(previous ? ['--previous'] : [])]);
}

/** A kubeconfig for a bearer token against the test cluster. */
function tokenKubeconfig(token: string, name: string): string {
  const file = path.join(work, `${name}.kubeconfig`);
  writeFileSync(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: { server: cluster.server, 'certificate-authority': cluster.caFile } }],
      users: [{ name: 'u', user: { token } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'c',
    }),
    { mode: 0o600 },
  );
  return file;
}

before(
  async () => {
    if (skip) return;
    work = mkdtempSync(path.join(os.tmpdir(), 'vigil-kubelet-'));
    claimStateDir();
    cluster = await startNodeCluster();
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.adminKubeconfig);
    core = kc.makeApiClient(k8s.CoreV1Api);
    apps = kc.makeApiClient(k8s.AppsV1Api);
    published = publish(cluster.registry);
  },
  { timeout: 40 * 60_000 },
);

after(async () => {
  if (skip) return;
  if (cluster) {
    helmOn(cluster.adminKubeconfig, ['uninstall', RELEASE, '--namespace', NS, '--wait', '--timeout', '2m']);
    await cluster.stop();
  }
  releaseStateDir();
  if (work) rmSync(work, { recursive: true, force: true });
});

test(
  "helm install from the README's command (registry changed): the scheduler puts the pod on the Node, containerd pulls it from the registry, it becomes Ready",
  { skip, timeout: 10 * 60_000 },
  async (t) => {
    t.diagnostic(
      `published ${published.image}@${published.digest} (built: ${published.built}, ${published.buildSeconds} s; push ${published.pushSeconds} s)`,
    );
    const args = installArgs(cluster.registry);
    assert.deepEqual(args.slice(0, 3), ['install', RELEASE, `oci://${cluster.registry}/vigil-dev/charts/vigil`]);
    helmOk(cluster.adminKubeconfig, args);

    pod = await onePod('the DaemonSet pod Ready', ready);
    // Placed by the scheduler: the template names no node, the binding event is default-scheduler's.
    const ds = await apps.readNamespacedDaemonSet({ name: 'vigil', namespace: NS });
    assert.equal(ds.spec?.template.spec?.nodeName, undefined);
    assert.equal(pod.spec?.nodeName, cluster.nodeName);
    const scheduled = await core.listNamespacedEvent({
      namespace: NS,
      fieldSelector: `involvedObject.name=${pod.metadata!.name},reason=Scheduled`,
    });
    assert.ok(
      scheduled.items.some((e) => e.source?.component === 'default-scheduler' || e.reportingComponent === 'default-scheduler'),
      `a Scheduled event from default-scheduler: ${JSON.stringify(scheduled.items.map((e) => e.message))}`,
    );

    // Pulled by containerd under the published name, and what it holds is what was pushed.
    const status = pod.status?.containerStatuses?.find((c) => c.name === 'vigil');
    assert.equal(status?.image, 'ghcr.io/vigil-dev/vigil:' + published.appVersion);
    assert.equal(status?.imageID, `ghcr.io/vigil-dev/vigil@${published.digest}`);
    const ctr = spawnSync('ctr', ['-a', cluster.containerdSocket, '-n', 'k8s.io', 'images', 'ls'], { encoding: 'utf8' });
    assert.equal(ctr.status, 0, ctr.stderr);
    assert.match(
      ctr.stdout,
      new RegExp(`^ghcr\\.io/vigil-dev/vigil:${published.appVersion.replaceAll('.', '\\.')}\\s+\\S+\\s+${published.digest}`, 'm'),
    );
    assert.equal(pod.spec?.containers[0].imagePullPolicy, 'IfNotPresent');

    // Ready by its probe on /healthz.
    assert.equal(pod.spec?.containers[0].readinessProbe?.httpGet?.path, '/healthz');
  },
);

test(
  "the pod reads /dev/kmsg through the chart's mount, finds its Node by the Downward API and writes with its projected token, the admission policy in force",
  { skip, timeout: 5 * 60_000 },
  async () => {
    const logs = podLogs(pod);
    assert.doesNotMatch(logs, /cannot see|EACCES|EPERM/, 'no source is blind');
    // In-cluster config: the kubernetes Service address, the token and CA the kubelet projected.
    assert.doesNotMatch(logs, /cannot reach the API server|certificate/);
    // NODE_NAME from spec.nodeName, and the Node it names carries the agent's conditions.
    const env = pod.spec?.containers[0].env?.find((e) => e.name === 'NODE_NAME');
    assert.equal(env?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
    const kernel = await waitFor('KernelReady on the Node', () => condition('KernelReady'), 60_000);
    // True, or False from another test's fault in the lookback; Unknown would mean the kernel log is unseen.
    assert.notEqual(kernel.status, 'Unknown', JSON.stringify(kernel));
    assert.ok(kernel.lastHeartbeatTime, JSON.stringify(kernel));

    // The token the container holds is the projected one, bound to this pod on this node.
    const token = kubectlOk([
      'exec',
      '-n',
      NS,
      pod.metadata!.name!,
      '-c',
      'vigil',
      '--',
      'cat',
      '/var/run/secrets/kubernetes.io/serviceaccount/token',
    ]).trim();
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8')) as {
      sub: string;
      'kubernetes.io': { pod: { name: string }; node?: { name: string } };
    };
    assert.equal(claims.sub, 'system:serviceaccount:vigil:vigil');
    assert.equal(claims['kubernetes.io'].pod.name, pod.metadata!.name);
    assert.equal(claims['kubernetes.io'].node?.name, cluster.nodeName);

    // The policy is bound, and it refuses what the token's RBAC would allow.
    assert.match(kubectlOk(['get', 'validatingadmissionpolicybinding', '-o', 'name']), /vigil-own-node-only/);
    const asPod = tokenKubeconfig(token, 'pod');
    const own = spawnSync(
      KUBECTL,
      [
        '--kubeconfig',
        asPod,
        'patch',
        'node',
        cluster.nodeName,
        '--subresource=status',
        '--type=strategic',
        '-p',
        JSON.stringify({ status: { conditions: [{ type: 'Ready', status: 'False', reason: 'Forged', message: "not Vigil's type" }] } }),
      ],
      { encoding: 'utf8' },
    );
    assert.notEqual(own.status, 0, 'the pod token may not write the Ready condition');
    assert.match(own.stderr, /denied|forbidden/i);
    // Another Node: RBAC lets the token patch any node's status, the policy only its own.
    const other = 'vigil-kubelet-test-other';
    await core.createNode({ body: { metadata: { name: other } } });
    try {
      const foreign = spawnSync(
        KUBECTL,
        [
          '--kubeconfig',
          asPod,
          'patch',
          'node',
          other,
          '--subresource=status',
          '--type=strategic',
          '-p',
          JSON.stringify({ status: { conditions: [{ type: 'KernelReady', status: 'False', reason: 'Forged', message: 'another node' }] } }),
        ],
        { encoding: 'utf8' },
      );
      assert.notEqual(foreign.status, 0, 'the pod token may not write another Node');
      assert.match(foreign.stderr, /denied|forbidden/i);
    } finally {
      await core.deleteNode({ name: other });
    }
    // The DaemonSet made a pod for that object-only Node, which no kubelet will ever run or confirm
    // deleted: remove it so the release is back to the one real pod (a test artifact, not under test).
    for (const p of await pods()) {
      if (p.spec?.nodeName !== cluster.nodeName) {
        await core.deleteNamespacedPod({ name: p.metadata!.name!, namespace: NS, gracePeriodSeconds: 0 });
      }
    }
    await onePod('one pod again after the other Node is gone', ready, 120_000);
  },
);

test(
  "a fault written to the host's /dev/kmsg becomes the Node's condition through the pod; kubectl logs and kubectl vigil status show it",
  { skip, timeout: 5 * 60_000 },
  async () => {
    const before = await condition('AcceleratedHardwareReady');
    const pci = uniquePci();
    writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=0, GPU has fallen off the bus.`);
    // The message lists the oldest problems first, bounded: other tests' faults in the lookback may fill it.
    const full = (before?.message?.length ?? 0) > 900;
    const c = await waitFor(
      `AcceleratedHardwareReady=False naming ${pci}`,
      async () => {
        const now = await condition('AcceleratedHardwareReady');
        return now?.status === 'False' && (full || now.message?.includes(`gpu:${pci}`)) ? now : undefined;
      },
      60_000,
      100,
    );
    assert.match(c.reason ?? '', /^NvidiaXID\d+Error$/);
    fatal = { pci, lastTransitionTime: iso(c.lastTransitionTime)! };

    const finding = podLogs(pod)
      .split('\n')
      .filter((l) => l.includes(pci))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.event === 'finding');
    assert.equal(finding?.reason, 'NvidiaXID79Error', 'kubectl logs shows the finding');

    // kubectl finds the plugin on the PATH, as an operator's would.
    const status = plugin(['status']);
    const row = status.split('\n').find((l) => l.startsWith(cluster.nodeName + ' '));
    assert.ok(row, status);
    assert.match(row, /False NvidiaXID\d+Error/);
  },
);

test(
  'helm upgrade with a changed value rolls the pod; the Fatal condition keeps its lastTransitionTime',
  { skip, timeout: 10 * 60_000 },
  async () => {
    const old = pod;
    // Quarantine on (one node: the share guard must allow 100 %), so uninstall below has marks to leave.
    const args = installArgs(cluster.registry);
    args[0] = 'upgrade';
    helmOk(cluster.adminKubeconfig, [
      ...args.filter((a) => a !== '--create-namespace'),
      '--reuse-values',
      '--set',
      'quarantine.enabled=true',
      '--set',
      'quarantine.maxQuarantinedShare=1',
    ]);
    pod = await onePod('a new Ready pod', (p) => p.metadata!.uid !== old.metadata!.uid && ready(p));
    const c = await condition('AcceleratedHardwareReady');
    assert.equal(c?.status, 'False');
    assert.equal(iso(c?.lastTransitionTime), fatal.lastTransitionTime);
    // The new configuration is in force: the False condition quarantines the node.
    const n = await waitFor(
      'the Node quarantined',
      async () => {
        const n = await node();
        return n.spec?.taints?.some((t) => t.key === 'vigil.dev/unhealthy') ? n : undefined;
      },
      60_000,
    );
    assert.equal(n.spec?.unschedulable, true);
    assert.equal(n.metadata?.labels?.['vigil.dev/quarantined'], 'true');
  },
);

test(
  'the container killed from outside is restarted by the kubelet; the Fatal condition keeps its lastTransitionTime',
  { skip, timeout: 10 * 60_000 },
  async () => {
    const status = pod.status!.containerStatuses!.find((c) => c.name === 'vigil')!;
    const id = status.containerID!.replace(/^containerd:\/\//, '');
    const kill = spawnSync('ctr', ['-a', cluster.containerdSocket, '-n', 'k8s.io', 'tasks', 'kill', '--signal', 'SIGKILL', id], {
      encoding: 'utf8',
    });
    assert.equal(kill.status, 0, kill.stderr);
    pod = await onePod('the container restarted and Ready', (p) => {
      const s = p.status?.containerStatuses?.find((c) => c.name === 'vigil');
      return p.metadata!.uid === pod.metadata!.uid && (s?.restartCount ?? 0) === status.restartCount + 1 && ready(p);
    });
    const c = await condition('AcceleratedHardwareReady');
    assert.equal(c?.status, 'False');
    assert.equal(iso(c?.lastTransitionTime), fatal.lastTransitionTime);
    assert.equal(pod.status!.containerStatuses!.find((c) => c.name === 'vigil')!.lastState?.terminated?.exitCode, 137);
  },
);

test("vigil logs fetches a bundle from the pod through the API server's node proxy to the real Node", { skip, timeout: 5 * 60_000 }, () => {
  const out = path.join(work, 'bundles');
  const r = spawnSync(
    process.execPath,
    [path.join(ROOT, 'bin/vigil.js'), 'logs', cluster.nodeName, '--kubeconfig', cluster.adminKubeconfig, '--output', out],
    {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 240_000,
    },
  );
  assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, new RegExp(`^${cluster.nodeName}\\s+Succeeded\\s`, 'm'));
  const files = readdirSync(out);
  assert.equal(files.length, 1, files.join(', '));
  const listing = spawnSync('tar', ['-tzf', path.join(out, files[0])], { encoding: 'utf8' });
  assert.equal(listing.status, 0, listing.stderr);
  assert.match(listing.stdout, /manifest\.json/);
  assert.equal(kubectlOk(['get', 'nodediagnostics', '-o', 'name']).trim(), '', 'the NodeDiagnostic is deleted');
});

const VIGIL_TYPES = ['KernelReady', 'NetworkingReady', 'StorageReady', 'ContainerRuntimeReady', 'AcceleratedHardwareReady'];

test(
  "helm uninstall leaves the Node as the README says: Vigil's conditions and quarantine marks as they were (STALE in kubectl vigil status), the CRD and the state hostPath",
  { skip, timeout: 5 * 60_000 },
  async () => {
    const before = await node();
    const mine = (n: k8s.V1Node) =>
      (n.status?.conditions ?? [])
        .filter((c) => VIGIL_TYPES.includes(c.type))
        .map((c) => ({ type: c.type, status: c.status, reason: c.reason, lastTransitionTime: iso(c.lastTransitionTime) }))
        .sort((a, b) => a.type.localeCompare(b.type));
    assert.ok(mine(before).length >= 2, JSON.stringify(mine(before)));
    helmOk(cluster.adminKubeconfig, ['uninstall', RELEASE, '--namespace', NS, '--wait', '--timeout', '2m']);
    await waitFor('no pod of the release', async () => (await pods()).length === 0, 120_000);

    const afterUninstall = await node();
    assert.deepEqual(mine(afterUninstall), mine(before));
    assert.ok(afterUninstall.spec?.taints?.some((t) => t.key === 'vigil.dev/unhealthy' && t.effect === 'NoSchedule'));
    assert.equal(afterUninstall.spec?.unschedulable, true);
    assert.equal(afterUninstall.metadata?.labels?.['vigil.dev/quarantined'], 'true');
    assert.ok(afterUninstall.metadata?.annotations?.['vigil.dev/cordoned-by-vigil'] !== undefined);

    // Nobody writes heartbeats any more: past twice the interval the row says STALE.
    await sleep(2500);
    const status = plugin(['status', '--heartbeat-interval', '1s']);
    assert.match(status.split('\n').find((l) => l.startsWith(cluster.nodeName + ' ')) ?? status, /STALE/);

    assert.match(kubectlOk(['get', 'crd', 'nodediagnostics.vigil.dev', '-o', 'name']), /nodediagnostics\.vigil\.dev/);
    assert.ok(stateFiles().length > 0, `the state hostPath ${STATE_HOST_PATH} keeps the agent's state`);
  },
);

test(
  'with privileged off the device cgroup refuses /dev/kmsg: KernelReady=Unknown, the pod NotReady, kubectl get ds READY 0',
  { skip, timeout: 10 * 60_000 },
  async () => {
    helmOk(cluster.adminKubeconfig, [...installArgs(cluster.registry), '--set', 'privileged=false']);
    const p = await onePod(
      'the unprivileged pod running',
      (x) => x.status?.containerStatuses?.some((c) => c.name === 'vigil' && c.state?.running) ?? false,
    );
    const sc = p.spec?.containers[0].securityContext;
    assert.equal(sc?.privileged ?? false, false);
    assert.deepEqual(sc?.capabilities?.add, ['SYSLOG']);

    const kernel = await waitFor(
      'KernelReady=Unknown',
      async () => {
        const c = await condition('KernelReady');
        if (c?.status === 'Unknown') return c;
        throw new Error(
          `KernelReady ${JSON.stringify(c)}; pod log tail: ${kubectl(['logs', '-n', NS, p.metadata!.name!, '--tail', '15']).out}`,
        );
      },
      120_000,
    );
    assert.match(kernel.message ?? '', /kmsg/i);
    assert.match(podLogs(p), /(EPERM|not permitted)[^\n]*\/dev\/kmsg/i);
    // The readiness probe fails on /healthz (503), so the pod stays NotReady and the DaemonSet shows 0 ready.
    await waitFor(
      'a failed readiness probe',
      async () =>
        (
          await core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.name=${p.metadata!.name},reason=Unhealthy` })
        ).items.some((e) => /Readiness probe failed/.test(e.message ?? '')),
      120_000,
      2000,
    );
    const now = (await pods())[0];
    assert.equal(ready(now), false);
    const [, desired, current, readyCount] = kubectlOk(['get', 'ds', 'vigil', '-n', NS, '--no-headers']).trim().split(/\s+/);
    assert.deepEqual([desired, current, readyCount], ['1', '1', '0']);
  },
);
