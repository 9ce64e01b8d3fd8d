/**
 * The real `vigil run` agent reporting to a real test kube-apiserver (test/cluster), two figures:
 *
 * kmsg_to_condition_p50/p99_ms: time from a write to the real /dev/kmsg until a watch on the Node
 * (admin client, fieldSelector on its name) delivers the event whose condition `BenchFaultReady`
 * is False with a message naming the fault's PCI address. The signal timed is that Node watch
 * event. Each fault names a fresh PCI address and is a Fatal user rule with a 1 s ttl (longer than
 * the sink's coalescing, so the False is written): the bench waits for the condition to go back to
 * True before the next fault, so every fault flips the condition (an accumulating Xid 79 would
 * not: the condition's message is bounded, and later GPUs fall off its end). The path is the one
 * an Xid 79 takes (reader, classifier, engine, Kubernetes sink with its default coalescing, API
 * server); a condition type of its own keeps other tests' faults in the shared kernel log from
 * latching it. Level 4, not 3, to keep the console quiet.
 *
 * api_writes_per_node_hour: a second agent with the default heartbeat and coalescing, idle, its
 * condition patches and Event writes (vigil_k8s_condition_writes_total plus
 * vigil_k8s_event_writes_total, every result) counted from its /metrics over
 * BENCH_API_WINDOW_SECONDS after it settles, scaled to an hour. Its kernel log is a FIFO only
 * this bench writes, so faults other tests write to the shared /dev/kmsg cannot cost it writes;
 * into it goes one persistent Warning: the same segfault record (AppCrash on one pid) every 30 s,
 * from start to end, so the figure includes what a Warning that persists costs in Event writes.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import * as k8s from '@kubernetes/client-node';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg, type AgentProcess, kubeAgentArgs } from '../test/helpers/agent-process.ts';
import { startCluster } from '../test/helpers/cluster.ts';
import { rssMiB } from './idle.ts';

const FAULTS = Number(process.env.BENCH_K8S_FAULTS ?? 200);
const WINDOW_SECONDS = Number(process.env.BENCH_API_WINDOW_SECONDS ?? 300);
// Past a new Event series' first count update (30-60 s): the window then sees the steady state.
const SETTLE_SECONDS = 90;
const CONDITION = 'BenchFaultReady';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Sum of every sample of the named counters in a Prometheus text exposition. */
function sumCounters(text: string, names: string[]): number {
  let total = 0;
  for (const line of text.split('\n')) {
    const name = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line)?.[1];
    if (name && names.includes(name)) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function apiWrites(agent: AgentProcess): Promise<number> {
  return sumCounters(String(await agent.get('/metrics')), ['vigil_k8s_condition_writes_total', 'vigil_k8s_event_writes_total']);
}

export async function benchKubernetes(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-bench-k8s-'));
  const cluster = await startCluster();
  const agents: AgentProcess[] = [];
  let fifoFd: number | undefined;
  let abortWatch: AbortController | undefined;
  let warningTimer: NodeJS.Timeout | undefined;
  try {
    // The idle agent first, so its settle time overlaps the latency run.
    const idleNode = 'bench-idle';
    await cluster.createNode(idleNode);
    const fifo = path.join(dir, 'kmsg.fifo');
    execFileSync('mkfifo', [fifo]);
    // Held open read-write so the agent's reader never sees the writer side close.
    fifoFd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
    let seq = 1;
    const fd = fifoFd;
    const persistentWarning = () =>
      writeSync(fd, `4,${seq++},${Math.round(process.uptime() * 1e6)},-;bench-app[4242]: segfault at 0 ip 00007f00 sp 00007f10 error 4\n`);
    persistentWarning();
    warningTimer = setInterval(persistentWarning, 30_000);
    const idleConfig = path.join(dir, 'idle.yaml');
    writeFileSync(
      idleConfig,
      kernelLogOnlyConfig(['kubernetes:', '  mode: "on"']).replace('kernelLog:\n', `kernelLog:\n  path: ${fifo}\n`),
    );
    const idle = await startAgent(
      [
        '--kubeconfig',
        cluster.vigilKubeconfig,
        '--node-name',
        idleNode,
        '--state-dir',
        path.join(dir, 'idle-state'),
        '--config',
        idleConfig,
      ],
      {},
    );
    agents.push(idle);
    await idle.waitFor((l) => l.msg === 'writing node conditions', 30_000);
    const settled = sleep(SETTLE_SECONDS * 1000).then(async () => ({ at: Date.now(), writes: await apiWrites(idle) }));
    // Awaited after the latency run; a failure there must not surface first as an unhandled rejection.
    settled.catch(() => undefined);

    // Latency: its own agent and Node.
    const node = 'bench-latency';
    await cluster.createNode(node);
    const token = randomBytes(4).toString('hex');
    const rules = path.join(dir, 'rules.yaml');
    writeFileSync(
      rules,
      [
        'rules:',
        '  - name: bench-fault',
        `    pattern: 'vigil-bench-${token}: GPU fault \\(PCI:(?<pci>[0-9a-f:.]+)\\)'`,
        `    contains: vigil-bench-${token}`,
        '    reason: BenchGpuFault',
        '    severity: Fatal',
        `    condition: ${CONDITION}`,
        '    recovery: {ttl: 1s}',
        "    entity: 'gpu:{pci}'",
        '',
      ].join('\n'),
    );
    const config = path.join(dir, 'latency.yaml');
    writeFileSync(
      config,
      kernelLogOnlyConfig(['kubernetes:', '  mode: "on"', 'engine:', '  tick: 100ms']).replace(
        'kernelLog:\n',
        `kernelLog:\n  userRules: [${rules}]\n`,
      ),
    );
    const agent = await startAgent(kubeAgentArgs(cluster.vigilKubeconfig, node, path.join(dir, 'latency-state'), config));
    agents.push(agent);
    await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);

    // The watch: every Node event's BenchFaultReady condition, stamped on arrival.
    let onCondition: (c: k8s.V1NodeCondition | undefined) => void = () => {};
    const watch = new k8s.Watch(cluster.admin.kc);
    abortWatch = await watch.watch(
      '/api/v1/nodes',
      { fieldSelector: `metadata.name=${node}` },
      (_type: string, obj: k8s.V1Node) => onCondition(obj.status?.conditions?.find((c) => c.type === CONDITION)),
      () => {},
    );
    const until = (pred: (c: k8s.V1NodeCondition | undefined) => boolean, what: string, timeoutMs = 10_000) =>
      new Promise<bigint>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
        onCondition = (c) => {
          if (!pred(c)) return;
          clearTimeout(t);
          onCondition = () => {};
          resolve(process.hrtime.bigint());
        };
      });

    const latencies: number[] = [];
    for (let i = 0; i < FAULTS; i++) {
      const pci = uniquePci();
      const seen = until((c) => c?.status === 'False' && (c.message ?? '').includes(pci), `fault ${i} (${pci}) on the Node`);
      const t0 = process.hrtime.bigint();
      writeKmsg(`vigil-bench-${token}: GPU fault (PCI:${pci}), bench probe ${i}`, 4);
      latencies.push(Number((await seen) - t0) / 1e6);
      // Back to True (ttl expiry, written) before the next fault, then a random gap.
      await until((c) => c?.status === 'True', `${CONDITION}=True after fault ${i}`);
      await sleep(50 + Math.random() * 150);
    }

    const start = await settled;
    // idle_rss_mib_kubernetes: the idle agent's peak RSS over the window (the Kubernetes sink on).
    let idleRss = rssMiB(idle.child.pid!);
    while (Date.now() < start.at + WINDOW_SECONDS * 1000) {
      await sleep(Math.min(5000, Math.max(0, start.at + WINDOW_SECONDS * 1000 - Date.now())));
      idleRss = Math.max(idleRss, rssMiB(idle.child.pid!));
    }
    const window = (Date.now() - start.at) / 1000;
    const writes = (await apiWrites(idle)) - start.writes;

    latencies.sort((a, b) => a - b);
    const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))];
    return {
      kmsg_to_condition_p50_ms: pct(50),
      kmsg_to_condition_p99_ms: pct(99),
      kmsg_to_condition_samples: latencies.length,
      api_writes_per_node_hour: (writes / window) * 3600,
      api_writes_window_s: window,
      idle_rss_mib_kubernetes: idleRss,
    };
  } finally {
    abortWatch?.abort();
    clearInterval(warningTimer);
    for (const a of agents) await a.stop();
    if (fifoFd !== undefined) closeSync(fifoFd);
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
