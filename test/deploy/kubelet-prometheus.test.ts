/**
 * The chart's real pod watched by a real Prometheus: the chart is installed as the README says (image
 * and chart from the local OCI registry, test/deploy/pod-install.ts) on a real Node (kubelet +
 * containerd + runc, test/helpers/node-cluster.ts), and Prometheus discovers the DaemonSet's pod
 * through kubernetes_sd on the API server with the chart's PodMonitor relabelling and alert rules
 * (`for` 5 s). The checks are checkChartMonitoring's (test/helpers/prometheus.ts), the same as
 * test/deploy/prometheus.test.ts runs against a plain agent process; "the agent stops answering" is
 * its container's process stopped (SIGSTOP) on the host, so the pod and its target stay.
 *
 * The release keeps its state in a temporary hostPath, so /var/lib/vigil (test/deploy/kubelet.test.ts)
 * is not touched.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { startNodeCluster, type NodeCluster } from '../helpers/node-cluster.ts';
import { checkChartMonitoring, ensurePrometheus, startChartPrometheus } from '../helpers/prometheus.ts';
import { helmOk, helmOn, installArgs, publish } from './pod-install.ts';
import { ensureTools } from './tools.ts';

const NS = 'vigil';
const RELEASE = 'vigil';
const FOR_S = 5;
const isRoot = process.getuid?.() === 0;
const tools =
  spawnSync('sh', ['-c', 'command -v podman && command -v containerd && command -v runc && command -v ctr'], { encoding: 'utf8' })
    .status === 0;
const skip = !isRoot ? 'needs root (a kubelet, /dev/kmsg)' : !tools ? 'podman, containerd or runc missing (.ci/run installs them)' : false;

let cluster: NodeCluster | undefined;
let work: string | undefined;
/** Host pids of stopped containers, continued in `after` so uninstall can end them. */
const stopped: number[] = [];

before(
  async () => {
    if (skip) return;
    ensureTools();
    ensurePrometheus();
    work = mkdtempSync(path.join(os.tmpdir(), 'vigil-kubelet-prom-'));
    cluster = await startNodeCluster();
    publish(cluster.registry);
  },
  { timeout: 40 * 60_000 },
);

after(async () => {
  for (const pid of stopped) {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // Already gone.
    }
  }
  if (cluster) {
    helmOn(cluster.adminKubeconfig, ['uninstall', RELEASE, '--namespace', NS, '--wait', '--timeout', '2m']);
    await cluster.stop();
  }
  if (work) rmSync(work, { recursive: true, force: true });
});

test(
  "the chart's pod on a real kubelet, watched by a real Prometheus: dashboard queries, lag panel, the condition and agent-down alerts",
  { skip, timeout: 15 * 60_000 },
  async (t) => {
    const c = cluster!;
    const dir = work!;
    const t0 = Date.now();
    helmOk(c.adminKubeconfig, [
      ...installArgs(c.registry),
      '--set',
      `stateHostPath=${path.join(dir, 'state')}`,
      '--wait',
      '--timeout',
      '5m',
    ]);
    t.diagnostic(`helm install --wait: ${Math.round((Date.now() - t0) / 1000)} s`);
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(c.adminKubeconfig);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: 'app.kubernetes.io/name=vigil' })).items;
    assert.equal(pods.length, 1, pods.map((p) => p.metadata?.name).join(', '));
    const pod = pods[0];
    const container = pod.spec!.containers[0];
    const port = container.ports!.find((p) => p.name === 'http')!.containerPort;
    const containerId = pod.status!.containerStatuses!.find((s) => s.name === container.name)!.containerID!.replace(/^containerd:\/\//, '');

    const tokenFile = path.join(dir, 'admin.token');
    writeFileSync(tokenFile, c.adminToken, { mode: 0o600 });
    const t1 = Date.now();
    const prom = await startChartPrometheus({ server: c.server, caFile: c.caFile, tokenFile, namespace: NS, forSeconds: FOR_S });
    t.after(() => prom.stop());
    t.diagnostic(`Prometheus ready: ${Math.round((Date.now() - t1) / 1000)} s`);

    await checkChartMonitoring(
      t,
      prom,
      {
        node: c.nodeName,
        namespace: NS,
        pod: pod.metadata!.name!,
        container: container.name,
        instance: `${pod.status!.podIP}:${port}`,
        async condition(type) {
          return (await core.readNode({ name: c.nodeName })).status?.conditions?.find((x) => x.type === type);
        },
        stop() {
          // The container's init process on the host, from containerd.
          const r = spawnSync('ctr', ['-a', c.containerdSocket, '-n', 'k8s.io', 'tasks', 'ls'], { encoding: 'utf8' });
          assert.equal(r.status, 0, r.stderr);
          const line = r.stdout.split('\n').find((l) => l.startsWith(containerId));
          const pid = Number(line?.split(/\s+/)[1]);
          assert.ok(pid > 0, `no task for ${containerId}:\n${r.stdout}`);
          stopped.push(pid);
          process.kill(pid, 'SIGSTOP');
          return Promise.resolve();
        },
      },
      FOR_S,
    );
  },
);
