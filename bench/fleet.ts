/**
 * `npm run bench:fleet`: the Kubernetes-facing part of Vigil for a simulated fleet against the real
 * test kube-apiserver (test/cluster), on a real etcd by default, written to bench/results/fleet.json.
 *
 * Each simulated node has its own Node object and its own Vigil: a real Engine feeding the real
 * KubernetesSink (condition writer and event recorder, with their own coalescing window, Event
 * rate limits, backoff, API client and keep-alive connection), wired as the agent wires them
 * (test/helpers/cluster.ts startVigil), with the production defaults: 5 min heartbeat, 200 ms
 * coalescing, 6 Events per reason per minute. All of them run in this one process.
 *
 * Identity: every node's Vigil holds its own ServiceAccount token (vigil/vigil, rights exactly
 * deploy/rbac.yaml) bound to its own Pod scheduled on its own Node, so the token carries that node
 * name and every write goes through deploy/admission-policy.yaml (own Node only, own condition types
 * only) as in a cluster; before the Vigils start, node 0's token is refused on node 1's status (the
 * policy is in force: admission_policy_enforced).
 *
 * The Nodes look like a kubelet's: labels of a GPU node, capacity and allocatable with 8 GPUs, node
 * info, addresses and 50 images (the kubelet's default nodeStatusMaxImages), so a Node in etcd is the
 * size of a real one (etcd_node_object_bytes, read back from etcd) and every status patch rewrites
 * all of it. No kubelet runs: the Nodes' only steady writers are the Vigils.
 *
 * Backend: a single-member etcd (test/cluster/up.sh --storage etcd, fsync on) by default;
 * VIGIL_CLUSTER_STORAGE=kine runs on kine (then the etcd figures are absent).
 *
 * Figures (all measured at fleet_nodes, nothing extrapolated, except the keys marked modelled):
 * - steady_api_requests_per_s: requests the API server counted (apiserver_request_total, every verb
 *   but WATCH, for nodes and events) over BENCH_FLEET_STEADY_SECONDS (default 300, one heartbeat
 *   period) once every node is started and written, divided by the window.
 * - etcd_write_bytes_per_node_hour: etcd's WAL bytes written (etcd_disk_wal_write_bytes_total) over
 *   the steady window, less the API server's own background writes (leases, measured over
 *   BENCH_FLEET_BASELINE_SECONDS before any Vigil starts, as a rate), per node, per hour: Vigil's
 *   share. etcd_wal_bytes_per_put: the same bytes per etcd put (etcd_mvcc_put_total).
 * - apiserver_cpu_cores_steady / apiserver_rss_mib_max, etcd_cpu_cores_steady / etcd_rss_mib_max:
 *   /proc/<pid>/stat CPU time over the window; RSS the largest 5 s sample over the whole run.
 *   bench_process_cpu_cores_steady: this process (all the simulated Vigils) over the same window.
 * - the incident: 20% of the nodes raise the same Fatal (Xid 79 on a GPU) at random moments within
 *   one minute. incident_condition_p50/p99/max_ms: from each node's finding to the Node event, seen
 *   by a watch on all Nodes, that shows its AcceleratedHardwareReady=False; incident_api_requests_per_s:
 *   the API server's request count over the incident divided by its length; incident_429s: responses
 *   with code 429 the API server counted during the incident; incident_retries: writes of Vigil's
 *   clients that failed (any status) and were retried; startup_429s: those of the start.
 * - npd_*: modelled (`modelled: true` in the JSON): node-problem-detector's measured per-node write
 *   rate (bench/results/compare.json api_writes_per_node_hour.npd, its idle agent on the same test
 *   API server) times the fleet size, and times the WAL bytes per put measured here.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import {
  ADMISSION_POLICY_YAML,
  clusterStorage,
  startCluster,
  startVigil,
  type TestCluster,
  type VigilUnderTest,
} from '../test/helpers/cluster.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const NODES = Number(process.env.BENCH_FLEET_NODES ?? 5000);
const STEADY_SECONDS = Number(process.env.BENCH_FLEET_STEADY_SECONDS ?? 300);
const BASELINE_SECONDS = Number(process.env.BENCH_FLEET_BASELINE_SECONDS ?? 60);
/**
 * Vigils start spread evenly over this many seconds (a DaemonSet rollout), 0 = all in the same
 * second (a control-plane restart). 5,000 over 240 s came up on the 2-core test machine with no 429;
 * the same-second start of 5,000 is not measured since the sink paces its requests (docs/benchmarks.md).
 */
const RAMP_SECONDS = Number(process.env.BENCH_FLEET_RAMP_SECONDS ?? 0);
const BACKEND = clusterStorage('etcd');
const INCIDENT_FRACTION = 0.2;
const INCIDENT_SPREAD_MS = 60_000;
const HEARTBEAT_MS = 5 * 60_000;
/** NPD's status heartbeat (--k8s-exporter-heartbeat-period), if compare.json has no measured rate. */
const NPD_HEARTBEAT_WRITES_PER_HOUR = 12;
const CLK_TCK = 100;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stderr.write(`[bench:fleet ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

/** Sum of a Prometheus text metric's samples whose labels include `labels`. */
function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!(line.startsWith(`${name}{`) || line.startsWith(`${name} `))) continue;
    const l = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([k, v]) => l[k] === v)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

interface ApiCounts {
  requests: number;
  code429: number;
}

async function apiCounts(cluster: TestCluster): Promise<ApiCounts> {
  const text = await cluster.metrics();
  let requests = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (labels.verb === 'WATCH' || (labels.resource !== 'nodes' && labels.resource !== 'events')) continue;
    requests += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return {
    requests,
    code429: metricSum(text, 'apiserver_request_total', { code: '429' }),
  };
}

interface EtcdCounts {
  walBytes: number;
  puts: number;
  dbBytes: number;
  dbInUseBytes: number;
}

async function etcdCounts(cluster: TestCluster): Promise<EtcdCounts | undefined> {
  if (!cluster.etcdUrl) return undefined;
  const text = await cluster.etcdMetrics();
  return {
    walBytes: metricSum(text, 'etcd_disk_wal_write_bytes_total'),
    puts: metricSum(text, 'etcd_mvcc_put_total'),
    dbBytes: metricSum(text, 'etcd_mvcc_db_total_size_in_bytes'),
    dbInUseBytes: metricSum(text, 'etcd_mvcc_db_total_size_in_use_in_bytes'),
  };
}

/** CPU seconds (user + system) of a process, from /proc/<pid>/stat. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / CLK_TCK;
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
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

/** Retries a setup call the API server answered with 429 (or a dropped connection) during the stampede of creates. */
async function retrying<T>(what: string, fn: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      const code = err instanceof k8s.ApiException ? err.code : 0;
      if (attempt >= 8 || (code !== 0 && code !== 429 && code < 500))
        throw new Error(`${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      await sleep(200 * 2 ** attempt);
    }
  }
}

const hex = (n: number, len: number) => {
  let s = '';
  let x = n * 2654435761;
  while (s.length < len) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    s += x.toString(16).padStart(8, '0');
  }
  return s.slice(0, len);
};

/** The 50 images a GPU node's kubelet reports (the same across the fleet, as in a real one). */
const IMAGES: k8s.V1ContainerImage[] = Array.from({ length: 50 }, (_, k) => ({
  names: [
    `registry.example.com/ml-platform/workload-${k}@sha256:${hex(k + 1, 64)}`,
    `registry.example.com/ml-platform/workload-${k}:v2.${k}.${k % 7}-cuda12.8-ubuntu24.04`,
  ],
  sizeBytes: 200_000_000 + ((k * 7919) % 50) * 180_000_000,
}));

function nodeLabels(name: string, i: number): Record<string, string> {
  return {
    'kubernetes.io/hostname': name,
    'kubernetes.io/os': 'linux',
    'kubernetes.io/arch': 'amd64',
    'beta.kubernetes.io/os': 'linux',
    'beta.kubernetes.io/arch': 'amd64',
    'node.kubernetes.io/instance-type': 'gpu-8x-h200',
    'topology.kubernetes.io/region': 'region-1',
    'topology.kubernetes.io/zone': `region-1${'abc'[i % 3]}`,
    'nvidia.com/gpu.present': 'true',
    'nvidia.com/gpu.product': 'NVIDIA-H200',
    'nvidia.com/gpu.count': '8',
    'nvidia.com/gpu.memory': '143771',
    'nvidia.com/cuda.driver.major': '570',
    'nvidia.com/cuda.driver.minor': '172',
    'nvidia.com/cuda.driver.rev': '08',
    'nvidia.com/mig.capable': 'true',
    'feature.node.kubernetes.io/rdma.available': 'true',
    'feature.node.kubernetes.io/pci-15b3.present': 'true',
    'node-pool': `gpu-pool-${i % 16}`,
  };
}

function kubeletStatus(name: string, i: number): k8s.V1NodeStatus {
  const now = new Date();
  const cond = (type: string, status: string, reason: string, message: string): k8s.V1NodeCondition => ({
    type,
    status,
    reason,
    message,
    lastHeartbeatTime: now,
    lastTransitionTime: now,
  });
  const resources = {
    cpu: '192',
    memory: '2113434624Ki',
    'ephemeral-storage': '3748936572Ki',
    'hugepages-1Gi': '0',
    'hugepages-2Mi': '0',
    pods: '110',
    'nvidia.com/gpu': '8',
    'rdma/rdma_shared_device_a': '63',
  };
  return {
    capacity: resources,
    allocatable: { ...resources, cpu: '191500m', memory: '2112336896Ki' },
    conditions: [
      cond('MemoryPressure', 'False', 'KubeletHasSufficientMemory', 'kubelet has sufficient memory available'),
      cond('DiskPressure', 'False', 'KubeletHasNoDiskPressure', 'kubelet has no disk pressure'),
      cond('PIDPressure', 'False', 'KubeletHasSufficientPID', 'kubelet has sufficient PID available'),
      cond('Ready', 'True', 'KubeletReady', 'kubelet is posting ready status'),
    ],
    addresses: [
      { type: 'InternalIP', address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` },
      { type: 'Hostname', address: name },
    ],
    daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
    nodeInfo: {
      machineID: hex(i + 7, 32),
      systemUUID: `${hex(i + 11, 8)}-${hex(i + 13, 4)}-${hex(i + 17, 4)}-${hex(i + 19, 4)}-${hex(i + 23, 12)}`,
      bootID: `${hex(i + 29, 8)}-${hex(i + 31, 4)}-${hex(i + 37, 4)}-${hex(i + 41, 4)}-${hex(i + 43, 12)}`,
      kernelVersion: '6.8.0-1021-nvidia',
      osImage: 'Ubuntu 24.04.2 LTS',
      containerRuntimeVersion: 'containerd://2.0.5',
      kubeletVersion: 'v1.34.4',
      kubeProxyVersion: '',
      operatingSystem: 'linux',
      architecture: 'amd64',
    },
    images: IMAGES,
  };
}

/** Size of one key's value in etcd, read through etcd's own gateway. */
async function etcdValueBytes(cluster: TestCluster, key: string): Promise<number | undefined> {
  if (!cluster.etcdUrl) return undefined;
  const res = await fetch(`${cluster.etcdUrl}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: Buffer.from(key).toString('base64') }),
  });
  const body = (await res.json()) as { kvs?: { value: string }[] };
  const v = body.kvs?.[0]?.value;
  return v === undefined ? undefined : Buffer.from(v, 'base64').length;
}

/** Node-problem-detector's measured write rate per node-hour (bench:compare's idle agent), if any. */
function npdWritesPerNodeHour(): { value: number; basis: string } {
  const file = path.join(ROOT, 'bench/results/compare.json');
  if (existsSync(file)) {
    const c = JSON.parse(readFileSync(file, 'utf8')) as {
      api_writes_per_node_hour?: { npd?: number };
      /** A partial bench:compare run's per-key stamp; a key without one was measured with the file (kine before etcd). */
      key_measured?: Record<string, { at: string; backend: string }>;
      backend?: string;
      measured_at?: string;
    };
    const v = c.api_writes_per_node_hour?.npd;
    if (typeof v === 'number' && v > 0) {
      return {
        value: v,
        basis: `NPD's api_writes_per_node_hour measured by bench:compare (${c.key_measured?.api_writes_per_node_hour?.backend ?? 'kine'}, ${c.key_measured?.api_writes_per_node_hour?.at ?? c.measured_at ?? '?'}) x fleet_nodes`,
      };
    }
  }
  return { value: NPD_HEARTBEAT_WRITES_PER_HOUR, basis: 'one status PATCH per node per 5 min heartbeat (NPD default), from its source' };
}

type Modelled = { value: number | null; modelled: true; basis: string };
type Figure = number | string | null | Modelled;

export async function benchFleet(): Promise<Record<string, Figure>> {
  const load0 = os.loadavg()[0];
  const cluster = await startCluster({ storage: BACKEND });
  const apiserverPid = Number(readFileSync(path.join(cluster.dir, 'apiserver.pid'), 'utf8'));
  const vigils: VigilUnderTest[] = [];
  const pids: Record<string, number> = {
    apiserver: apiserverPid,
    bench: process.pid,
    ...(cluster.etcdPid ? { etcd: cluster.etcdPid } : {}),
  };
  const rssMax: Record<string, number> = {};
  const sampleRss = () => {
    for (const [k, pid] of Object.entries(pids)) if (existsSync(`/proc/${pid}/status`)) rssMax[k] = Math.max(rssMax[k] ?? 0, rssMiB(pid));
  };
  const rssTimer = setInterval(sampleRss, 5000);
  let abortWatch: AbortController | undefined;
  try {
    await cluster.apply(ADMISSION_POLICY_YAML);
    const names = Array.from({ length: NODES }, (_, i) => `fleet-${String(i).padStart(5, '0')}`);
    const kubeconfigs: string[] = [];
    const t0 = Date.now();
    await pool(names, 32, async (name, i) => {
      await retrying(`create ${name}`, () =>
        cluster.admin.core.createNode({ body: { metadata: { name, labels: nodeLabels(name, i) } } }).catch((err: unknown) => {
          // A retried create whose first try went through.
          if (!(err instanceof k8s.ApiException && err.code === 409)) throw err;
        }),
      );
      await retrying(`status ${name}`, () =>
        cluster.admin.core.patchNodeStatus(
          { name, body: { status: kubeletStatus(name, i) } },
          k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
        ),
      );
      // A token bound to a Pod on this Node: its node name is what the admission policy checks.
      const token = await retrying(`token ${name}`, () => cluster.tokenForPodOnNode(name, 6 * 3600));
      kubeconfigs[i] = cluster.kubeconfigForToken(token, name);
      if ((i + 1) % 1000 === 0) log(`${i + 1} Nodes, Pods and tokens`);
    });
    const setupSeconds = (Date.now() - t0) / 1000;
    log(`${NODES} Nodes (kubelet-shaped), Pods and bound tokens in ${setupSeconds.toFixed(1)} s`);
    const nodeBytes = await etcdValueBytes(cluster, `/registry/minions/${names[0]}`);
    // The policy is in force: node 0's Vigil may not write node 1's status.
    let policyEnforced = false;
    if (NODES > 1) {
      const kc = new k8s.KubeConfig();
      kc.loadFromFile(kubeconfigs[0]);
      const core = kc.makeApiClient(k8s.CoreV1Api);
      const probe = { status: { conditions: [{ type: 'KernelReady', status: 'True', reason: 'Probe', message: 'probe' }] } };
      for (let i = 0; i < 100 && !policyEnforced; i++) {
        try {
          await core.patchNodeStatus(
            { name: names[1], body: probe },
            k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
          );
          await sleep(200);
        } catch (err) {
          policyEnforced = err instanceof k8s.ApiException && (err.code === 422 || err.code === 403);
          if (!policyEnforced) await sleep(200);
        }
      }
      if (!policyEnforced) throw new Error('deploy/admission-policy.yaml is not refusing a write to another Node');
    }

    // The API server's own writes (leases, bootstrap controllers) with no Vigil running: a rate.
    await sleep(5000);
    const b0 = await etcdCounts(cluster);
    const bCpu0 = cpuSeconds(apiserverPid);
    const bStart = Date.now();
    await sleep(BASELINE_SECONDS * 1000);
    const b1 = await etcdCounts(cluster);
    const baselineWindow = (Date.now() - bStart) / 1000;
    const baselineWalPerS = b0 && b1 ? (b1.walBytes - b0.walBytes) / baselineWindow : 0;
    const baselineApiserverCores = (cpuSeconds(apiserverPid) - bCpu0) / baselineWindow;
    log(
      `baseline: etcd WAL ${baselineWalPerS.toFixed(0)} B/s, API server ${baselineApiserverCores.toFixed(3)} cores, over ${baselineWindow.toFixed(0)} s`,
    );

    const t1 = Date.now();
    for (const [i, name] of names.entries()) {
      if (RAMP_SECONDS > 0) await sleep(Math.max(0, t1 + (i * RAMP_SECONDS * 1000) / NODES - Date.now()));
      vigils.push(
        startVigil({
          kubeconfig: kubeconfigs[i],
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
    for (let n = 0; ; n++) {
      const synced = vigils.filter((v) => v.sink.synced).length;
      if (synced === NODES) break;
      if (n % 60 === 0) log(`${synced} of ${NODES} Vigils written after ${((Date.now() - t1) / 1000).toFixed(0)} s`);
      await sleep(500);
    }
    const startupSeconds = (Date.now() - t1) / 1000;
    log(`${NODES} Vigils started and written in ${startupSeconds.toFixed(1)} s`);
    const nodeBytesWithVigil = await etcdValueBytes(cluster, `/registry/minions/${names[0]}`);

    // Steady state: one heartbeat period, the beats spread over it.
    const s0 = await apiCounts(cluster);
    const e0 = await etcdCounts(cluster);
    const cpu0 = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuSeconds(pid)]));
    const steadyStart = Date.now();
    await sleep(STEADY_SECONDS * 1000);
    const s1 = await apiCounts(cluster);
    const e1 = await etcdCounts(cluster);
    const steadyWindow = (Date.now() - steadyStart) / 1000;
    const cores = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, (cpuSeconds(pid) - cpu0[k]) / steadyWindow]));
    const loadSteady = os.loadavg()[0];
    const steadyRate = (s1.requests - s0.requests) / steadyWindow;
    const walSteady = e0 && e1 ? e1.walBytes - e0.walBytes : NaN;
    const putsSteady = e0 && e1 ? e1.puts - e0.puts : NaN;
    const vigilWal = walSteady - baselineWalPerS * steadyWindow;
    const writeBytesPerNodeHour = (vigilWal / NODES) * (3600 / steadyWindow);
    log(
      `steady: ${steadyRate.toFixed(2)} requests/s, etcd WAL ${walSteady} B (${putsSteady} puts), API server ${cores.apiserver.toFixed(3)} cores, over ${steadyWindow.toFixed(0)} s`,
    );

    // The incident: 20% of the nodes raise the same Fatal within one minute.
    const affected = names
      .map((n, i) => ({ n, i, r: Math.random() }))
      .sort((a, b) => a.r - b.r)
      .slice(0, Math.round(NODES * INCIDENT_FRACTION));
    const injectedAt = new Map<string, number>();
    const latencies = new Map<string, number>();
    let allSeen: () => void = () => {};
    const everyNodeShows = new Promise<void>((r) => (allSeen = r));
    // Watch from now (the list's resourceVersion), not from a synthetic ADDED of every Node.
    const rv = (await cluster.admin.core.listNode({ limit: 1 })).metadata?.resourceVersion;
    const watch = new k8s.Watch(cluster.admin.kc);
    abortWatch = await watch.watch(
      '/api/v1/nodes',
      rv ? { resourceVersion: rv } : {},
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
    const clientFailures = async () => {
      let failed = 0;
      let c429 = 0;
      for (const v of vigils) {
        for (const name of ['vigil_k8s_condition_writes_total', 'vigil_k8s_event_writes_total']) {
          for (const e of (await v.registry.getSingleMetric(name)?.get())?.values ?? []) {
            if (e.labels.result === 'ok') continue;
            failed += e.value;
            if (e.labels.result === '429') c429 += e.value;
          }
        }
      }
      return { failed, c429 };
    };
    const c0 = await clientFailures();
    const i0 = await apiCounts(cluster);
    const iCpu0 = cpuSeconds(apiserverPid);
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
    const i1 = await apiCounts(cluster);
    const incidentApiserverCores = (cpuSeconds(apiserverPid) - iCpu0) / incidentSeconds;
    const lat = [...latencies.values()].sort((a, b) => a - b);
    const c1 = await clientFailures();
    sampleRss();

    const npd = npdWritesPerNodeHour();
    const walPerPut = (walSteady - baselineWalPerS * steadyWindow) / (s1.requests - s0.requests || NaN);
    const modelled = (value: number | null, basis: string): Modelled => ({ value, modelled: true, basis });
    return {
      backend: BACKEND,
      fleet_nodes: NODES,
      identities: 'one pod-bound ServiceAccount token per node, through deploy/admission-policy.yaml',
      setup_seconds: setupSeconds,
      startup_seconds: startupSeconds,
      startup_ramp_s: RAMP_SECONDS,
      startup_429s: i0.code429,
      steady_window_s: steadyWindow,
      steady_api_requests_per_s: steadyRate,
      steady_api_requests_per_node_hour: (steadyRate / NODES) * 3600,
      admission_policy_enforced: policyEnforced ? 1 : 0,
      etcd_node_object_bytes: nodeBytes ?? null,
      etcd_node_object_bytes_with_vigil: nodeBytesWithVigil ?? null,
      etcd_write_bytes_per_node_hour: Number.isFinite(writeBytesPerNodeHour) ? writeBytesPerNodeHour : null,
      etcd_wal_bytes_steady: Number.isFinite(walSteady) ? walSteady : null,
      etcd_puts_steady: Number.isFinite(putsSteady) ? putsSteady : null,
      etcd_wal_bytes_per_vigil_request: Number.isFinite(walPerPut) ? walPerPut : null,
      etcd_baseline_wal_bytes_per_s: b0 ? baselineWalPerS : null,
      etcd_db_size_mib: e1 ? e1.dbBytes / 2 ** 20 : null,
      etcd_db_in_use_mib: e1 ? e1.dbInUseBytes / 2 ** 20 : null,
      apiserver_cpu_cores_steady: cores.apiserver,
      apiserver_cpu_cores_baseline: baselineApiserverCores,
      apiserver_cpu_cores_incident: incidentApiserverCores,
      apiserver_rss_mib_max: rssMax.apiserver ?? null,
      etcd_cpu_cores_steady: cores.etcd ?? null,
      etcd_rss_mib_max: rssMax.etcd ?? null,
      bench_process_cpu_cores_steady: cores.bench,
      bench_process_rss_mib_max: rssMax.bench ?? null,
      incident_nodes: affected.length,
      incident_nodes_shown: lat.length,
      incident_condition_p50_ms: pct(lat, 50),
      incident_condition_p99_ms: pct(lat, 99),
      incident_condition_max_ms: lat[lat.length - 1],
      incident_seconds: incidentSeconds,
      incident_api_requests_per_s: (i1.requests - i0.requests) / incidentSeconds,
      incident_429s: i1.code429 - i0.code429,
      incident_429s_seen_by_vigil: c1.c429 - c0.c429,
      incident_retries: c1.failed - c0.failed,
      load_avg_1m_start: load0,
      load_avg_1m_steady: loadSteady,
      npd_steady_api_requests_per_s: modelled((npd.value * NODES) / 3600, npd.basis),
      // At the 5,000 nodes whatever this run reached: NPD's rate is per node, so the model scales.
      npd_steady_api_requests_per_s_5000: modelled((npd.value * 5000) / 3600, `${npd.basis.replace('x fleet_nodes', 'x 5,000')}`),
      npd_etcd_write_bytes_per_node_hour: modelled(
        Number.isFinite(walPerPut) ? npd.value * walPerPut : null,
        `${npd.basis}, each write costing the WAL bytes per request measured here for Vigil's status patches (an overestimate for its Events)`,
      ),
    };
  } finally {
    clearInterval(rssTimer);
    abortWatch?.abort();
    await Promise.all(vigils.map((v) => v.stop()));
    await cluster.stop();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const figures = await benchFleet();
  const round = (v: number) => Math.round(v * 1000) / 1000;
  const rounded = Object.fromEntries(
    Object.entries(figures).map(([k, v]) => [
      k,
      typeof v === 'number'
        ? round(v)
        : v !== null && typeof v === 'object'
          ? { ...v, value: v.value === null ? null : round(v.value) }
          : v,
    ]),
  );
  const out = path.join(ROOT, 'bench', 'results', 'fleet.json');
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify({ ...rounded, measured_at: new Date().toISOString() }, null, 2) + '\n');
  for (const [k, v] of Object.entries(rounded)) process.stderr.write(`  ${k} = ${JSON.stringify(v)}\n`);
  process.stderr.write(`wrote ${out}\n`);
}
