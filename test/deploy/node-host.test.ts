/**
 * The real Node of `up.sh --with-node`: a Deployment's pod is created by the controller manager,
 * placed by the scheduler and run by the kubelet from images containerd pulls over plain HTTP from the
 * local registry (also under the ghcr.io name); and `down.sh` puts back everything the kubelet and
 * containerd changed on the host. Needs root (the kubelet changes sysctls, iptables and cgroups).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../helpers/cluster.ts';
import { CRANE, holdNodeLock, PAUSE_TAR, startNodeCluster, type NodeCluster } from '../helpers/node-cluster.ts';
import { ok, ROOT, run } from './tools.ts';

// Other work on this machine (podman builds in the image test) adds and removes its own mounts,
// cgroups, links and NAT rules meanwhile; those are left out of the comparison, nothing else is.
const FOREIGN =
  /\/run\/netns\/netns-|\/var\/lib\/containers\/|\/run\/containers\/|\/run\/libpod|libpod|CNI-|NETAVARK|PODMAN|cni-podman|podman/;

const SYSCTL_PREFIXES = [
  'vm.',
  'kernel.panic',
  'kernel.keys.',
  'net.ipv4.ip_forward',
  'net.ipv4.conf.all.',
  'net.ipv6.conf.all.',
  'net.bridge.',
];
const FIXED_PATHS = [
  '/var/lib/kubelet',
  '/var/log/pods',
  '/var/log/containers',
  '/run/containerd',
  '/var/lib/cni',
  '/run/netns',
  '/etc/cni',
  '/opt/cni',
  '/opt/containerd',
  '/var/lib/containerd',
  '/etc/kubernetes',
];

interface HostSnapshot {
  sysctls: Record<string, string>;
  iptables: Record<string, string[]>;
  cgroups: string[];
  mounts: string[];
  links: string[];
  addresses: string[];
  paths: Record<string, string>;
}

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
}

function cgroupDirs(dir: string, out: string[]): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    const p = path.join(dir, e.name);
    out.push(p);
    cgroupDirs(p, out);
  }
}

/** What the kubelet, containerd and the CNI plugins may change on a host, read independently of up.sh. */
function snapshotHost(): HostSnapshot {
  const sysctls: Record<string, string> = {};
  for (const line of sh('sysctl', ['-a']).split('\n')) {
    const m = /^(\S+) = (.*)$/.exec(line);
    if (m && SYSCTL_PREFIXES.some((p) => m[1].startsWith(p))) sysctls[m[1]] = m[2]!;
  }
  const iptables: Record<string, string[]> = {};
  for (const bin of ['iptables-save', 'ip6tables-save']) {
    for (const table of ['filter', 'nat', 'mangle', 'raw']) {
      iptables[`${bin} ${table}`] = sh(bin, ['-t', table])
        .split('\n')
        .filter((l) => l && !l.startsWith('#') && !FOREIGN.test(l))
        .map((l) => l.replace(/ \[\d+:\d+\]$/, '').replace(/^\[\d+:\d+\] /, ''));
    }
  }
  const cgroups: string[] = [];
  cgroupDirs('/sys/fs/cgroup', cgroups);
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' ')[4])
    .filter((m) => !FOREIGN.test(m));
  const links = sh('ip', ['-o', 'link', 'show'])
    .split('\n')
    // podman's bridge and its veths ("master podman0") are someone else's.
    .filter((l) => l && !FOREIGN.test(l))
    .map((l) => l.split(': ')[1].replace(/@.*/, ''));
  // The node's InternalIP lives on lo while the node runs.
  const addresses = sh('ip', ['-o', 'addr', 'show'])
    .split('\n')
    .filter((l) => l && !FOREIGN.test(l))
    .map((l) => l.split(/\s+/).slice(1, 4).join(' '));
  const paths: Record<string, string> = {};
  for (const p of FIXED_PATHS) paths[p] = existsSync(p) ? (statSync(p).isDirectory() ? 'dir' : 'file') : 'absent';
  return {
    sysctls,
    iptables,
    cgroups: cgroups.filter((c) => !FOREIGN.test(c)).sort(),
    mounts: [...new Set(mounts)].sort(),
    links: links.sort(),
    addresses: addresses.sort(),
    paths,
  };
}

/** The host now, part by part, is as `before` showed it. */
function assertHostAsBefore(before: HostSnapshot): void {
  const after = snapshotHost();
  assert.deepEqual(after.sysctls, before.sysctls);
  assert.deepEqual(after.iptables, before.iptables);
  assert.deepEqual(after.cgroups, before.cgroups);
  assert.deepEqual(after.mounts, before.mounts);
  assert.deepEqual(after.links, before.links);
  assert.deepEqual(after.addresses, before.addresses);
  assert.deepEqual(after.paths, before.paths);
}

const isRoot = process.getuid?.() === 0;

describe('a real Node (up.sh --with-node)', { skip: isRoot ? false : 'needs root', timeout: 1_200_000 }, () => {
  let cluster: NodeCluster;
  let hostBefore: HostSnapshot;
  let hostDuring: HostSnapshot;
  let releaseLock: (() => void) | undefined;

  before(async () => {
    // Held from before the first snapshot to after the last: no other node cluster changes the host between.
    releaseLock = await holdNodeLock();
    hostBefore = snapshotHost();
    cluster = await startNodeCluster({ lockHeld: true });
    hostDuring = snapshotHost();
  });
  after(async () => {
    await cluster?.stop();
    releaseLock?.();
  });

  test('a Deployment runs on the node from images pulled over plain HTTP from the local registry, also as ghcr.io/…', async () => {
    // The pause binary as a workload: a static image with no shell, tiny, and it never exits.
    const local = cluster.push(PAUSE_TAR, 'vigil-test/pulled-pause:1');
    const ghcr = cluster.push(PAUSE_TAR, 'vigil-test/ghcr-pause:1');
    // A different digest, so each container's imageID names the repository it was pulled from.
    ok(run(CRANE, ['mutate', '--insecure', '--label', 'vigil.test/pulled-as=ghcr', '-t', ghcr, ghcr]), 'crane mutate');
    const deployment = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'pulled', namespace: 'default' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'pulled' } },
        template: {
          metadata: { labels: { app: 'pulled' } },
          spec: {
            hostNetwork: true,
            automountServiceAccountToken: false,
            terminationGracePeriodSeconds: 0,
            containers: [
              { name: 'local', image: local, imagePullPolicy: 'Always' },
              { name: 'ghcr', image: 'ghcr.io/vigil-test/ghcr-pause:1', imagePullPolicy: 'Always' },
            ],
          },
        },
      },
    };
    ok(cluster.kubectl(['apply', '-f', '-'], { input: JSON.stringify(deployment) }), 'kubectl apply');
    interface PodList {
      items: {
        spec: { nodeName?: string };
        status: { phase?: string; containerStatuses?: { name: string; ready: boolean; imageID: string }[] };
      }[];
    }
    const pod = await waitFor(
      'the Deployment pod Running with both containers ready',
      () => {
        const list = JSON.parse(
          ok(cluster.kubectl(['get', 'pods', '-n', 'default', '-l', 'app=pulled', '-o', 'json']), 'kubectl get pods'),
        ) as PodList;
        const p = list.items[0];
        return p?.status.phase === 'Running' && p.status.containerStatuses?.every((c) => c.ready) ? p : undefined;
      },
      180_000,
      1000,
    );
    assert.equal(pod.spec.nodeName, cluster.nodeName, 'the scheduler placed it on the node');
    const ids = Object.fromEntries((pod.status.containerStatuses ?? []).map((c) => [c.name, c.imageID]));
    assert.match(ids.local, new RegExp(`^${cluster.registry.replace(/\./g, '\\.')}/vigil-test/pulled-pause@sha256:`));
    assert.match(ids.ghcr, /^ghcr\.io\/vigil-test\/ghcr-pause@sha256:/);
    // The API server reaches the kubelet on the node's published address (nodeIp:kubeletPort) for
    // logs; pause writes none.
    const logs = cluster.kubectl(['logs', '-n', 'default', 'deploy/pulled', '-c', 'local']);
    assert.equal(logs.code, 0, logs.err);
  });

  test('a pod network pod gets an address on the bridge (CNI), so down.sh has a bridge, veth and netns to clean up', async () => {
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'bridged', namespace: 'default' },
      spec: {
        automountServiceAccountToken: false,
        terminationGracePeriodSeconds: 0,
        containers: [{ name: 'pause', image: `${cluster.registry}/vigil-test/pulled-pause:1` }],
      },
    };
    ok(cluster.kubectl(['apply', '-f', '-'], { input: JSON.stringify(pod) }), 'kubectl apply');
    const ip = await waitFor(
      'the bridged pod Running with a pod IP',
      () => {
        const p = JSON.parse(ok(cluster.kubectl(['get', 'pod', '-n', 'default', 'bridged', '-o', 'json']), 'kubectl get pod')) as {
          status: { phase?: string; podIP?: string };
        };
        return p.status.phase === 'Running' ? p.status.podIP : undefined;
      },
      120_000,
      1000,
    );
    assert.match(ip, /^10\.244\.50\.\d+$/);
    assert.match(sh('ip', ['-o', 'link', 'show', 'master', 'vigilbr0']), /veth/);
  });

  test('a second --with-node cluster on the same host fails clearly while the first runs', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-node-second-'));
    try {
      const r = run('bash', [path.join(ROOT, 'test/cluster/up.sh'), '--with-node', dir], { env: { VIGIL_NODE_LOCK_WAIT: '1' } });
      assert.notEqual(r.code, 0);
      assert.match(r.err, new RegExp(`another --with-node cluster \\(${cluster.dir}\\) holds /run/vigil-node.lock`));
      assert.equal(existsSync(path.join(dir, 'kine.pid')), false, 'it started nothing');
    } finally {
      spawnSync('bash', [path.join(ROOT, 'test/cluster/down.sh'), '--purge', dir], { stdio: 'ignore' });
    }
  });

  test('cluster:down leaves the host as it found it', async () => {
    const node = JSON.parse(ok(cluster.kubectl(['get', 'node', cluster.nodeName, '-o', 'json']), 'kubectl get node')) as {
      status: { conditions: { type: string; status: string }[]; addresses: { type: string; address: string }[] };
    };
    assert.equal(node.status.conditions.find((c) => c.type === 'Ready')?.status, 'True');
    assert.deepEqual(node.status.addresses.find((a) => a.type === 'InternalIP')?.address, cluster.nodeIp);
    // Not loopback (the API server proxies to no 127/8 address), yet delivered on this machine only.
    assert.doesNotMatch(cluster.nodeIp, /^127\./);
    assert.match(sh('ip', ['route', 'get', cluster.nodeIp]), new RegExp(`^local ${cluster.nodeIp.replace(/\./g, '\\.')} dev lo `));
    assert.ok(hostDuring.addresses.includes(`lo inet ${cluster.nodeIp}/32`), hostDuring.addresses.join('\n'));
    // The snapshot sees what the node changed (so the comparison below can fail).
    assert.notDeepEqual(hostDuring.sysctls, hostBefore.sysctls, 'the kubelet changed no sysctl');
    assert.equal(hostDuring.sysctls['vm.overcommit_memory'], '1');
    assert.ok(
      hostDuring.cgroups.some((c) => c.endsWith('/kubepods')),
      'no /kubepods cgroup while the node ran',
    );
    assert.ok(
      Object.values(hostDuring.iptables)
        .flat()
        .some((l) => l.includes('KUBE-')),
      'no KUBE- iptables chain while the node ran',
    );

    await cluster.stop();
    assertHostAsBefore(hostBefore);
    assert.equal(existsSync(cluster.dir), false, 'down.sh --purge removed the state dir');
  });
});

describe('a node cluster killed without down.sh', { skip: isRoot ? false : 'needs root', timeout: 900_000 }, () => {
  test('the next up.sh --with-node puts the host back from its record and starts (no "Chain already exists")', async (t) => {
    const releaseLock = await holdNodeLock();
    t.after(releaseLock);
    const hostBefore = snapshotHost();
    const killed = await startNodeCluster({ lockHeld: true });
    t.after(() => killed.stop());
    // As when the machine's session ends mid-test: every process of the cluster dies at once, and
    // the kubelet's chains, sysctls and cgroups, the node address and the service route stay.
    for (const f of readdirSync(killed.dir).filter((n) => n.endsWith('.pid'))) {
      const pid = Number(readFileSync(path.join(killed.dir, f), 'utf8'));
      if (pid > 1) spawnSync('kill', ['-KILL', String(pid)]);
    }
    const left = snapshotHost();
    assert.ok(left.addresses.includes(`lo inet ${killed.nodeIp}/32`), 'the killed node left its address');
    assert.ok(
      left.iptables['iptables-save nat'].some((l) => l.includes('KUBE-VIGIL-APISERVER')),
      'the killed node left its chain',
    );

    const next = await startNodeCluster({ lockHeld: true });
    await next.stop();
    assertHostAsBefore(hostBefore);
  });
});
