/**
 * `npm run bench:fleet`: the Kubernetes-facing part of Vigil for a simulated fleet against the real
 * test kube-apiserver (test/cluster), written to bench/results/fleet.json.
 *
 * Each simulated node has its own Node object and its own Vigil: a real Engine feeding the real
 * KubernetesSink (condition writer and event recorder, with their own coalescing window, Event
 * rate limits, backoff and API client), wired as the agent wires them (test/helpers/cluster.ts
 * startVigil), with the production defaults: 5 min heartbeat, 200 ms coalescing, 6 Events per
 * reason per minute. All of them run in this one process. Identity: Vigil's ServiceAccount token
 * (rights exactly deploy/rbac.yaml), one for every node. In a cluster each pod's token is bound
 * to its pod and node, but the user name, which API Priority and Fairness keys flows on, is the
 * same (system:serviceaccount:vigil:vigil), so one shared token loads the API server as a real
 * fleet does; the per-node admission policy is not applied (it adds a CEL check per write).
 *
 * Figures:
 * - steady_api_requests_per_s: requests the API server counted (apiserver_request_total, every
 *   verb but WATCH, for nodes and events) over BENCH_FLEET_STEADY_SECONDS (default 300, one
 *   heartbeat period) once every node is started and written, divided by the window;
 *   steady_api_requests_per_node_hour and the extrapolation to 5,000 nodes follow from it.
 * - the incident: 30% of the nodes raise the same Fatal (Xid 79 on a GPU) at random moments
 *   within one minute. incident_condition_p50/p99/max_ms: from each node's finding to the Node
 *   event, seen by a watch on all Nodes, that shows its AcceleratedHardwareReady=False;
 *   incident_api_requests_per_s: the API server's request count over the incident (first finding
 *   to the last Node showing it) divided by its length; incident_429s: responses with code 429 the
 *   API server counted during the incident (incident_429s_seen_by_vigil: those Vigil's clients
 *   got; startup_429s: those of the start, every node reading and writing its Node at once).
 * - npd_steady_api_requests_per_s_5000: what node-problem-detector's defaults cost at 5,000 nodes:
 *   one status PATCH per node per heartbeat period (--k8s-exporter-heartbeat-period, 5 min; its
 *   1 s sync loop writes only on change), from its source (see docs/benchmarks.md), not measured.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { startCluster, startVigil, type TestCluster, type VigilUnderTest } from '../test/helpers/cluster.ts';

const NODES = Number(process.env.BENCH_FLEET_NODES ?? 1000);
const STEADY_SECONDS = Number(process.env.BENCH_FLEET_STEADY_SECONDS ?? 300);
const INCIDENT_FRACTION = 0.3;
const INCIDENT_SPREAD_MS = 60_000;
const HEARTBEAT_MS = 5 * 60_000;
const NPD_HEARTBEAT_MS = 5 * 60_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Counts {
  requests: number;
  code429: number;
}

async function requestCounts(cluster: TestCluster): Promise<Counts> {
  let requests = 0;
  let code429 = 0;
  for (const line of (await cluster.metrics()).split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (labels.code === '429') code429 += value;
    if (labels.verb === 'WATCH' || (labels.resource !== 'nodes' && labels.resource !== 'events')) continue;
    requests += value;
  }
  return { requests, code429 };
}

/** Runs `fn` over `items` with at most `limit` at once. */
async function pool<T>(items: T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i], i);
      }
    }),
  );
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export async function benchFleet(): Promise<Record<string, number>> {
  const cluster = await startCluster();
  const vigils: VigilUnderTest[] = [];
  let abortWatch: AbortController | undefined;
  try {
    const names = Array.from({ length: NODES }, (_, i) => `fleet-${String(i).padStart(5, '0')}`);
    const t0 = Date.now();
    await pool(names, 32, async (name) => {
      await cluster.createNode(name);
    });
    process.stderr.write(`  ${NODES} Nodes created in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);

    const t1 = Date.now();
    for (const name of names) {
      vigils.push(
        startVigil({
          kubeconfig: cluster.vigilKubeconfig,
          nodeName: name,
          sink: {
            heartbeatMs: HEARTBEAT_MS,
            coalesceMs: 200,
            eventsPerReasonPerMinute: 6,
            retry: { baseMs: 500, maxMs: 30_000 },
            finalWriteMs: 0,
          },
        }),
      );
    }
    await Promise.all(vigils.map((v) => v.started));
    // Every node has written its initial conditions.
    while (!vigils.every((v) => v.sink.conditions.synced)) await sleep(500);
    const startupSeconds = (Date.now() - t1) / 1000;
    process.stderr.write(`  ${NODES} Vigils started and written in ${startupSeconds.toFixed(1)} s\n`);

    // Steady state: one heartbeat period, the beats spread over it.
    const s0 = await requestCounts(cluster);
    const steadyStart = Date.now();
    await sleep(STEADY_SECONDS * 1000);
    const s1 = await requestCounts(cluster);
    const steadyWindow = (Date.now() - steadyStart) / 1000;
    const steadyRate = (s1.requests - s0.requests) / steadyWindow;
    process.stderr.write(`  steady: ${steadyRate.toFixed(2)} requests/s over ${steadyWindow.toFixed(0)} s\n`);

    // The incident: 30% of the nodes raise the same Fatal within one minute.
    const affected = names
      .map((n, i) => ({ n, i, r: Math.random() }))
      .sort((a, b) => a.r - b.r)
      .slice(0, Math.round(NODES * INCIDENT_FRACTION));
    const injectedAt = new Map<string, number>();
    const latencies = new Map<string, number>();
    let allSeen: () => void = () => {};
    const everyNodeShows = new Promise<void>((r) => (allSeen = r));
    const watch = new k8s.Watch(cluster.admin.kc);
    abortWatch = await watch.watch(
      '/api/v1/nodes',
      {},
      (_type: string, node: k8s.V1Node) => {
        const name = node.metadata?.name ?? '';
        const at = injectedAt.get(name);
        if (at === undefined || latencies.has(name)) return;
        const c = node.status?.conditions?.find((x) => x.type === 'AcceleratedHardwareReady');
        if (c?.status !== 'False') return;
        latencies.set(name, performance.now() - at);
        if (latencies.size === affected.length) allSeen();
      },
      () => {},
    );
    const client429s = async () => {
      let n = 0;
      for (const v of vigils) {
        n += await v.metric('vigil_k8s_condition_writes_total', { result: '429' });
        n += await v.metric('vigil_k8s_event_writes_total', { result: '429' });
      }
      return n;
    };
    const c0 = await client429s();
    const i0 = await requestCounts(cluster);
    const incidentStart = Date.now();
    for (const a of affected) {
      setTimeout(
        () => {
          injectedAt.set(a.n, performance.now());
          vigils[a.i].engine.finding({
            reason: 'NvidiaXID79Error',
            message: 'GPU has fallen off the bus',
            source: 'kmsg',
            entity: 'gpu:0000:3b:00.0',
            at: Date.now(),
            attrs: { xid: 79 },
          });
        },
        a.r * (1 / INCIDENT_FRACTION) * INCIDENT_SPREAD_MS,
      );
    }
    await Promise.race([everyNodeShows, sleep(INCIDENT_SPREAD_MS + 120_000)]);
    const incidentSeconds = (Date.now() - incidentStart) / 1000;
    const i1 = await requestCounts(cluster);
    const lat = [...latencies.values()].sort((a, b) => a - b);
    const c1 = await client429s();
    return {
      fleet_nodes: NODES,
      steady_api_requests_per_s: steadyRate,
      steady_api_requests_per_node_hour: (steadyRate / NODES) * 3600,
      steady_window_s: steadyWindow,
      steady_api_requests_per_s_5000: (steadyRate / NODES) * 5000,
      npd_steady_api_requests_per_s_5000: 5000 / (NPD_HEARTBEAT_MS / 1000),
      incident_nodes: affected.length,
      incident_nodes_shown: lat.length,
      incident_condition_p50_ms: pct(lat, 50),
      incident_condition_p99_ms: pct(lat, 99),
      incident_condition_max_ms: lat[lat.length - 1],
      incident_seconds: incidentSeconds,
      incident_api_requests_per_s: (i1.requests - i0.requests) / incidentSeconds,
      incident_429s: i1.code429 - i0.code429,
      incident_429s_seen_by_vigil: c1 - c0,
      startup_429s: i0.code429,
      startup_seconds: startupSeconds,
    };
  } finally {
    abortWatch?.abort();
    await Promise.all(vigils.map((v) => v.stop()));
    await cluster.stop();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const figures = await benchFleet();
  const rounded = Object.fromEntries(Object.entries(figures).map(([k, v]) => [k, Math.round(v * 1000) / 1000]));
  const out = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results', 'fleet.json');
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify({ ...rounded, measured_at: new Date().toISOString() }, null, 2) + '\n');
  for (const [k, v] of Object.entries(rounded)) process.stderr.write(`  ${k} = ${v}\n`);
  process.stderr.write(`wrote ${out}\n`);
}
