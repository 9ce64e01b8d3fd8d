/**
 * `npm run bench:pod`: the chart's pod on a real node (test/cluster/up.sh --with-node), installed by
 * the README's command from a local registry (test/deploy/pod-install.ts). Merges into
 * bench/results/latest.json (other keys kept):
 *
 * pod_idle_working_set_mib, pod_idle_cpu_millicores: the container's figures from the kubelet's
 * /stats/summary (through the API server's node proxy), as installed (every default), over
 * BENCH_POD_IDLE_SECONDS (600) after a minute's settling: CPU from the difference of
 * usageCoreNanoSeconds over the window, the working set the highest sampled (every 15 s). Where the
 * node proxy refuses the node's address (a loopback InternalIP), the kubelet's port is asked directly.
 *
 * pod_kmsg_to_condition_p50/p99_ms: then `helm upgrade --reuse-values` adds one user rule (a file on
 * the host, read through the chart's read-only /host mount): a Fatal line of its own with a 1 s ttl
 * for a condition type of its own (listed in conditions.extraTypes, so the admission policy lets it
 * through; other tests' faults in the shared kernel log cannot latch it), and engine.tick 100ms so
 * the recovery is written promptly. BENCH_POD_FAULTS (150) faults, each naming a fresh PCI address:
 * timed from the write to the host's /dev/kmsg until a Node watch (admin, fieldSelector on its name)
 * delivers the condition False naming that address; the bench waits for it to go back to True
 * before the next fault. The path: the pod's kernel-log reader, classifier, engine, Kubernetes sink
 * (default coalescing), the projected token, the admission policy, the API server.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { uniquePci, writeKmsg } from '../test/helpers/agent-process.ts';
import { startNodeCluster } from '../test/helpers/node-cluster.ts';
import { LATEST_PATH, mergeLatest, newRun } from './latest.ts';
import { claimStateDir, helmOk, installArgs, publish, releaseStateDir } from '../test/deploy/pod-install.ts';

const FAULTS = Number(process.env.BENCH_POD_FAULTS ?? 150);
const IDLE_SECONDS = Number(process.env.BENCH_POD_IDLE_SECONDS ?? 600);
const SETTLE_SECONDS = 60;
const CONDITION = 'BenchPodFaultReady';
const NS = 'vigil';
const SELECTOR = 'app.kubernetes.io/name=vigil,app.kubernetes.io/instance=vigil';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface ContainerStats {
  name: string;
  cpu?: { time: string; usageCoreNanoSeconds?: number };
  memory?: { time: string; workingSetBytes?: number };
}
interface Summary {
  pods: { podRef: { name: string; namespace: string }; containers?: ContainerStats[] }[];
}

async function readyPod(core: k8s.CoreV1Api, notUid?: string, timeoutMs = 600_000): Promise<k8s.V1Pod> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const live = (await core.listNamespacedPod({ namespace: NS, labelSelector: SELECTOR })).items.filter(
      (p) => !p.metadata?.deletionTimestamp,
    );
    const p = live.length === 1 ? live[0] : undefined;
    if (p && p.metadata?.uid !== notUid && p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) return p;
    if (Date.now() > deadline) throw new Error(`no Ready vigil pod after ${timeoutMs} ms: ${JSON.stringify(live.map((x) => x.status))}`);
    await sleep(1000);
  }
}

export async function benchPod(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-bench-pod-'));
  claimStateDir();
  const cluster = await startNodeCluster();
  let abortWatch: AbortController | undefined;
  try {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.adminKubeconfig);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const published = publish(cluster.registry);
    process.stderr.write(`  published ${published.image}@${published.digest} (built: ${published.built})\n`);
    helmOk(cluster.adminKubeconfig, installArgs(cluster.registry), 600_000);
    const pod = await readyPod(core);
    const podName = pod.metadata!.name!;

    // Idle, as installed.
    const stats = async (): Promise<ContainerStats> => {
      const body: unknown = await core.connectGetNodeProxyWithPath({ name: cluster.nodeName, path: 'stats/summary' });
      const summary = (typeof body === 'string' ? JSON.parse(body) : body) as Summary;
      const c = summary.pods
        .find((p) => p.podRef.namespace === NS && p.podRef.name === podName)
        ?.containers?.find((x) => x.name === 'vigil');
      if (!c?.cpu?.usageCoreNanoSeconds || !c.memory?.workingSetBytes) throw new Error(`no stats for ${podName} yet`);
      return c;
    };
    await sleep(SETTLE_SECONDS * 1000);
    const first = await stats();
    let workingSet = first.memory!.workingSetBytes!;
    const end = Date.now() + IDLE_SECONDS * 1000;
    while (Date.now() < end) {
      await sleep(Math.min(15_000, Math.max(0, end - Date.now())));
      workingSet = Math.max(workingSet, (await stats()).memory!.workingSetBytes!);
    }
    // The kubelet refreshes container stats every 10-15 s: wait for a sample past the window's end.
    let last = await stats();
    while (Date.parse(last.cpu!.time) < end) {
      await sleep(2000);
      last = await stats();
    }
    workingSet = Math.max(workingSet, last.memory!.workingSetBytes!);
    const idleSeconds = (Date.parse(last.cpu!.time) - Date.parse(first.cpu!.time)) / 1000;
    const idleMillicores = ((last.cpu!.usageCoreNanoSeconds! - first.cpu!.usageCoreNanoSeconds!) / 1e9 / idleSeconds) * 1000;
    process.stderr.write(
      `  idle: ${(workingSet / 2 ** 20).toFixed(1)} MiB working set, ${idleMillicores.toFixed(2)} millicores over ${idleSeconds} s\n`,
    );

    // Latency: one user rule of the bench's own, read by the pod from the host through /host.
    const token = randomBytes(4).toString('hex');
    const rules = path.join(dir, 'rules.yaml');
    writeFileSync(
      rules,
      [
        'rules:',
        '  - name: bench-pod-fault',
        `    pattern: 'vigil-bench-pod-${token}: GPU fault \\(PCI:(?<pci>[0-9a-f:.]+)\\)'`,
        `    contains: vigil-bench-pod-${token}`,
        '    reason: BenchPodGpuFault',
        '    severity: Fatal',
        `    condition: ${CONDITION}`,
        '    recovery: {ttl: 1s}',
        "    entity: 'gpu:{pci}'",
        '',
      ].join('\n'),
    );
    const upgrade = installArgs(cluster.registry).filter((a) => a !== '--create-namespace');
    upgrade[0] = 'upgrade';
    helmOk(
      cluster.adminKubeconfig,
      [
        ...upgrade,
        '--reuse-values',
        '--set-json',
        `conditions.extraTypes=${JSON.stringify([CONDITION])}`,
        '--set-json',
        `extraConfig=${JSON.stringify({ kernelLog: { userRules: [`/host${rules}`] }, engine: { tick: '100ms' } })}`,
      ],
      600_000,
    );
    await readyPod(core, pod.metadata!.uid);

    let onCondition: (c: k8s.V1NodeCondition | undefined) => void = () => {};
    abortWatch = await new k8s.Watch(kc).watch(
      '/api/v1/nodes',
      { fieldSelector: `metadata.name=${cluster.nodeName}` },
      (_type: string, obj: k8s.V1Node) => onCondition(obj.status?.conditions?.find((c) => c.type === CONDITION)),
      () => {},
    );
    const until = (pred: (c: k8s.V1NodeCondition | undefined) => boolean, what: string, timeoutMs = 30_000) =>
      new Promise<bigint>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
        onCondition = (c) => {
          if (!pred(c)) return;
          clearTimeout(t);
          onCondition = () => {};
          resolve(process.hrtime.bigint());
        };
      });
    // The rule's condition appears (True) once the new pod reports.
    const node = await core.readNode({ name: cluster.nodeName });
    if (node.status?.conditions?.find((c) => c.type === CONDITION)?.status !== 'True') {
      await until((c) => c?.status === 'True', `${CONDITION}=True from the upgraded pod`, 120_000);
    }

    const latencies: number[] = [];
    for (let i = 0; i < FAULTS; i++) {
      const pci = uniquePci();
      const seen = until((c) => c?.status === 'False' && (c.message ?? '').includes(pci), `fault ${i} (${pci}) on the Node`);
      const t0 = process.hrtime.bigint();
      // Level 4: the console stays quiet (a <3> write is echoed and slow).
      writeKmsg(`vigil-bench-pod-${token}: GPU fault (PCI:${pci}), bench probe ${i}`, 4);
      latencies.push(Number((await seen) - t0) / 1e6);
      await until((c) => c?.status === 'True', `${CONDITION}=True after fault ${i}`);
      await sleep(50 + Math.random() * 150);
    }
    latencies.sort((a, b) => a - b);
    const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))];
    return {
      pod_kmsg_to_condition_p50_ms: pct(50),
      pod_kmsg_to_condition_p99_ms: pct(99),
      pod_kmsg_to_condition_samples: latencies.length,
      pod_idle_working_set_mib: workingSet / 2 ** 20,
      pod_idle_cpu_millicores: idleMillicores,
      pod_idle_measured_seconds: idleSeconds,
    };
  } finally {
    abortWatch?.abort();
    await cluster.stop();
    releaseStateDir();
    rmSync(dir, { recursive: true, force: true });
  }
}

// Run directly: merge the figures into bench/results/latest.json through bench/latest.ts, as bench/run.ts does.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const run = newRun(['pod']);
  process.stderr.write('bench pod...\n');
  const written = mergeLatest(await benchPod(), run);
  for (const [k, v] of Object.entries(written)) process.stderr.write(`  ${k} = ${v}\n`);
  process.stderr.write(`wrote ${LATEST_PATH} (run ${run.id})\n`);
}
