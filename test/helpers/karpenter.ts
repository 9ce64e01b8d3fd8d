/**
 * Karpenter's real node repair beside the test control plane (test/helpers/cluster.ts):
 * - karpenter-vigil (test/cluster/karpenter/): Karpenter's kwok cloud provider, whose repair policies are the AWS
 *   provider's for Vigil's condition types, tolerations scaled down for tests; run with NodeRepair=true.
 * - the real KWOK controller (sigs.k8s.io/kwok), which keeps the Nodes that the kwok provider creates Ready as a kubelet
 *   would (its node-initialize and node-heartbeat Stages). Karpenter only counts a node as initialized once it is
 *   Ready=True, and repair replaces only initialized nodes.
 * Both are built by test/cluster/build-karpenter.sh from the Go module proxy, which also copies Karpenter's CRDs.
 *
 * Objects are watched through the API server (ApiWatch) so each test can assert every step and when it happened.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import type { AgentProcess } from './agent-process.ts';
import { waitFor, type TestCluster } from './cluster.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BUILD_KARPENTER = path.join(ROOT, 'test/cluster/build-karpenter.sh');
/** Where build-karpenter.sh copies Karpenter's CRDs (and the KWOKNodeClass CRD) from the module. */
export const KARPENTER_CRDS_DIR = path.join(ROOT, '.cache/karpenter/crds');
export const KWOK_STAGES_DIR = path.join(ROOT, '.cache/karpenter/kwok-stages');
/** A KWOK Stage standing in for the node lifecycle controller (takes node.kubernetes.io/not-ready off Ready Nodes). */
export const NOT_READY_TAINT_STAGE = path.join(ROOT, 'test/cluster/karpenter/node-not-ready-taint.yaml');

export const NODEPOOL_LABEL = 'karpenter.sh/nodepool';
/** The smallest built-in kwok instance type (1 CPU): each NodeClaim is one small Node. */
export const INSTANCE_TYPE = 'c-1x-amd64-linux';

export interface KarpenterBinaries {
  karpenter: string;
  kwok: string;
}

let built: Promise<KarpenterBinaries> | undefined;
/** Builds (or finds cached) karpenter-vigil and kwok; fails naming the script. */
export function buildKarpenter(): Promise<KarpenterBinaries> {
  built ??= new Promise((resolve, reject) => {
    execFile('bash', [BUILD_KARPENTER], { cwd: ROOT, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) {
        reject(
          new Error(`${path.relative(ROOT, BUILD_KARPENTER)} failed (run it by hand to see why): ${err.message}\n${stderr.slice(-3000)}`),
        );
        return;
      }
      const [karpenter, kwok] = stdout.trim().split('\n');
      if (!karpenter || !kwok) reject(new Error(`${BUILD_KARPENTER} printed no binary paths: ${stdout}`));
      else resolve({ karpenter, kwok });
    });
  });
  return built;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** A child process whose output lines are kept (and can be awaited). */
export interface Child {
  proc: ChildProcess;
  lines: string[];
  waitForLine(re: RegExp, timeoutMs?: number): Promise<string>;
  stop(): Promise<void>;
}

function spawnChild(name: string, bin: string, args: string[], env: NodeJS.ProcessEnv): Child {
  const proc = spawn(bin, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const waiters = new Set<{ re: RegExp; resolve: (l: string) => void }>();
  let exited = false;
  const onData = (() => {
    let buf = '';
    return (d: Buffer) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        lines.push(line);
        for (const w of waiters) {
          if (!w.re.test(line)) continue;
          waiters.delete(w);
          w.resolve(line);
        }
      }
    };
  })();
  proc.stdout.on('data', onData);
  proc.stderr.on('data', onData);
  const exit = new Promise<void>((resolve) =>
    proc.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  return {
    proc,
    lines,
    waitForLine(re, timeoutMs = 60_000) {
      const hit = lines.find((l) => re.test(l));
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const w = { re, resolve: (l: string) => (clearTimeout(t), resolve(l)) };
        const t = setTimeout(() => {
          waiters.delete(w);
          reject(new Error(`${name}: no line matching ${String(re)} within ${timeoutMs} ms; last lines:\n${lines.slice(-15).join('\n')}`));
        }, timeoutMs);
        waiters.add(w);
      });
    },
    async stop() {
      if (exited || proc.exitCode !== null) return;
      proc.kill('SIGTERM');
      const killer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exit;
      clearTimeout(killer);
    },
  };
}

/** Applies every CRD build-karpenter.sh copied and waits until the API server serves them. */
export async function installKarpenterCrds(cluster: TestCluster): Promise<string[]> {
  const files = readdirSync(KARPENTER_CRDS_DIR).filter((f) => f.endsWith('.yaml'));
  if (!files.some((f) => f.includes('kwoknodeclasses')))
    throw new Error(`no KWOKNodeClass CRD in ${KARPENTER_CRDS_DIR}; run ${BUILD_KARPENTER}`);
  for (const f of files) await cluster.apply(path.join(KARPENTER_CRDS_DIR, f));
  const ext = cluster.admin.kc.makeApiClient(k8s.ApiextensionsV1Api);
  const names = (await ext.listCustomResourceDefinition()).items.map((c) => c.metadata!.name!);
  for (const name of names) {
    await waitFor(
      `CRD ${name} Established`,
      async () =>
        (await ext.readCustomResourceDefinition({ name })).status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True'),
      30_000,
    );
  }
  return names;
}

export interface KarpenterOptions {
  /** VIGIL_REPAIR_TOLERATION_SCALE: multiplies the AWS tolerations (10 min for AcceleratedHardwareReady). */
  tolerationScale: number;
  /** VIGIL_REPAIR_TOLERATIONS: absolute per-type tolerations after scaling, e.g. "NetworkingReady=30s". */
  tolerations?: string;
  /** LEGACY_NODE_REPAIR: the node.health controller that deletes NodeClaims directly (planned for deprecation). */
  legacy?: boolean;
  /** Extra environment for karpenter-vigil. */
  env?: NodeJS.ProcessEnv;
}

export interface KarpenterUnderTest {
  karpenter: Child;
  kwok: Child;
  metricsPort: number;
  /** The tolerations in force, per condition type. */
  tolerationMs(type: string): number;
  metrics(): Promise<string>;
  stop(): Promise<void>;
}

/**
 * Starts karpenter-vigil (NodeRepair=true, StaticCapacity=true for static NodePools) and the KWOK controller against
 * the cluster with its admin kubeconfig, after installing the CRDs. Resolves once Karpenter reports ready.
 */
export async function startKarpenter(cluster: TestCluster, o: KarpenterOptions): Promise<KarpenterUnderTest> {
  const bins = await buildKarpenter();
  await installKarpenterCrds(cluster);
  const [metricsPort, probePort, kwokPort] = [await freePort(), await freePort(), await freePort()];
  const karpenter = spawnChild('karpenter-vigil', bins.karpenter, [], {
    KUBECONFIG: cluster.adminKubeconfig,
    DISABLE_LEADER_ELECTION: 'true',
    FEATURE_GATES: 'NodeRepair=true,StaticCapacity=true',
    LEGACY_NODE_REPAIR: o.legacy ? 'true' : 'false',
    METRICS_PORT: String(metricsPort),
    HEALTH_PROBE_PORT: String(probePort),
    LOG_LEVEL: 'debug',
    VIGIL_REPAIR_TOLERATION_SCALE: String(o.tolerationScale),
    VIGIL_REPAIR_TOLERATIONS: o.tolerations ?? '',
    ...o.env,
  });
  // The KWOK controller plays kubelet for the Nodes the kwok provider creates (annotation kwok.x-k8s.io/node=fake),
  // as Karpenter's own hack/install-kwok.sh configures it; its server listens on loopback only.
  const kwok = spawnChild(
    'kwok',
    bins.kwok,
    [
      `--kubeconfig=${cluster.adminKubeconfig}`,
      '--manage-all-nodes=false',
      '--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake',
      `--server-address=127.0.0.1:${kwokPort}`,
      '--node-ip=127.0.0.1',
      ...readdirSync(KWOK_STAGES_DIR).map((f) => `--config=${path.join(KWOK_STAGES_DIR, f)}`),
      `--config=${NOT_READY_TAINT_STAGE}`,
    ],
    {},
  );
  const stop = async () => {
    await Promise.all([karpenter.stop(), kwok.stop()]);
  };
  try {
    await waitFor(
      'karpenter-vigil /readyz',
      async () => {
        if (karpenter.proc.exitCode !== null)
          throw new Error(`karpenter-vigil exited ${karpenter.proc.exitCode}:\n${karpenter.lines.slice(-20).join('\n')}`);
        const res = await fetch(`http://127.0.0.1:${probePort}/readyz`).catch(() => undefined);
        return res?.status === 200;
      },
      120_000,
      250,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  const policies = new Map<string, number>();
  for (const l of karpenter.lines) {
    if (!l.includes('vigil repair policy')) continue;
    const j = JSON.parse(l) as { condition: string; toleration: string };
    policies.set(j.condition, goDurationMs(j.toleration));
  }
  return {
    karpenter,
    kwok,
    metricsPort,
    tolerationMs(type) {
      const ms = policies.get(type);
      if (ms === undefined) throw new Error(`karpenter-vigil logged no repair policy for ${type}`);
      return ms;
    },
    async metrics() {
      return (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    },
    stop,
  };
}

/** Go's time.Duration.String() (e.g. "20s", "1m0s", "1.5s") in milliseconds. */
export function goDurationMs(s: string): number {
  const unit: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, µs: 0.001, us: 0.001, ns: 0.000001 };
  let ms = 0;
  for (const m of s.matchAll(/([\d.]+)(h|ms|m|s|µs|us|ns)/g)) ms += Number(m[1]) * unit[m[2]];
  return ms;
}

// ---- Karpenter objects -----------------------------------------------------------------------------------------

export interface KarpenterObjects {
  custom: k8s.CustomObjectsApi;
  /** A KWOKNodeClass, marked Ready (the kwok provider has no NodeClass status controller, so the harness plays it). */
  createNodeClass(name: string): Promise<void>;
  /** A static NodePool (spec.replicas) of 1-CPU kwok nodes; Karpenter keeps `replicas` NodeClaims. */
  createStaticNodePool(name: string, nodeClass: string, replicas: number): Promise<void>;
}

export function karpenterObjects(cluster: TestCluster): KarpenterObjects {
  const custom = cluster.admin.kc.makeApiClient(k8s.CustomObjectsApi);
  const nodePoolSpec = (nodeClass: string) => ({
    template: {
      spec: {
        nodeClassRef: { group: 'karpenter.kwok.sh', kind: 'KWOKNodeClass', name: nodeClass },
        requirements: [{ key: 'node.kubernetes.io/instance-type', operator: 'In', values: [INSTANCE_TYPE] }],
        expireAfter: 'Never',
      },
    },
    // Repair rides the disruption budget; 100% so the budget never holds back a repair in these small pools.
    disruption: { budgets: [{ nodes: '100%' }], consolidateAfter: 'Never' },
  });
  return {
    custom,
    async createNodeClass(name) {
      await custom.createClusterCustomObject({
        group: 'karpenter.kwok.sh',
        version: 'v1alpha1',
        plural: 'kwoknodeclasses',
        body: { apiVersion: 'karpenter.kwok.sh/v1alpha1', kind: 'KWOKNodeClass', metadata: { name }, spec: {} },
      });
      const now = new Date().toISOString();
      await custom.patchClusterCustomObjectStatus(
        {
          group: 'karpenter.kwok.sh',
          version: 'v1alpha1',
          plural: 'kwoknodeclasses',
          name,
          body: {
            status: {
              conditions: [{ type: 'Ready', status: 'True', reason: 'Ready', message: '', lastTransitionTime: now, observedGeneration: 1 }],
            },
          },
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    },
    async createStaticNodePool(name, nodeClass, replicas) {
      await custom.createClusterCustomObject({
        group: 'karpenter.sh',
        version: 'v1',
        plural: 'nodepools',
        body: { apiVersion: 'karpenter.sh/v1', kind: 'NodePool', metadata: { name }, spec: { replicas, ...nodePoolSpec(nodeClass) } },
      });
    },
  };
}

// ---- watching the API server -------------------------------------------------------------------------------------

export interface Seen<T> {
  /** Date.now() when the watch event arrived. */
  at: number;
  type: string;
  obj: T;
}

/** Records every watch event of one collection, with its arrival time, and lets a test wait for one. */
export class ApiWatch<T extends k8s.KubernetesObject = k8s.KubernetesObject> {
  readonly seen: Seen<T>[] = [];
  private waiters = new Set<{ pred: (s: Seen<T>) => boolean; resolve: (s: Seen<T>) => void }>();
  private abort: AbortController | undefined;
  private closed = false;

  private constructor(
    private readonly kc: k8s.KubeConfig,
    private readonly path: string,
  ) {}

  static async start<T extends k8s.KubernetesObject>(kc: k8s.KubeConfig, apiPath: string): Promise<ApiWatch<T>> {
    const w = new ApiWatch<T>(kc, apiPath);
    await w.connect();
    return w;
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    // The watch starts with the current objects (ADDED); after an error it reconnects and lists again.
    this.abort = await new k8s.Watch(this.kc).watch(
      this.path,
      { allowWatchBookmarks: false },
      (type, obj: T) => this.push({ at: Date.now(), type, obj }),
      () => {
        if (!this.closed) setTimeout(() => void this.connect().catch(() => undefined), 200);
      },
    );
  }

  private push(s: Seen<T>): void {
    this.seen.push(s);
    for (const w of this.waiters) {
      if (!w.pred(s)) continue;
      this.waiters.delete(w);
      w.resolve(s);
    }
  }

  /** The first event (already seen or still to come) that matches. */
  waitFor(what: string, pred: (s: Seen<T>) => boolean, timeoutMs: number): Promise<Seen<T>> {
    const hit = this.seen.find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve, reject) => {
      const w = { pred, resolve: (s: Seen<T>) => (clearTimeout(t), resolve(s)) };
      const t = setTimeout(() => {
        this.waiters.delete(w);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what} (watch ${this.path}, ${this.seen.length} events seen)`));
      }, timeoutMs);
      this.waiters.add(w);
    });
  }

  stop(): void {
    this.closed = true;
    this.abort?.abort();
    for (const w of this.waiters) this.waiters.delete(w);
  }
}

export type NodeClaim = k8s.KubernetesObject & {
  spec?: { nodeClassRef?: { name: string } };
  status?: { nodeName?: string; providerID?: string; conditions?: { type: string; status: string }[] };
};

/** The three watches the repair tests assert from. */
export interface RepairWatches {
  nodeClaims: ApiWatch<NodeClaim>;
  nodes: ApiWatch<k8s.V1Node>;
  events: ApiWatch<k8s.CoreV1Event>;
  stop(): void;
}

export async function watchRepair(cluster: TestCluster): Promise<RepairWatches> {
  const kc = cluster.admin.kc;
  const nodeClaims = await ApiWatch.start<NodeClaim>(kc, '/apis/karpenter.sh/v1/nodeclaims');
  const nodes = await ApiWatch.start<k8s.V1Node>(kc, '/api/v1/nodes');
  const events = await ApiWatch.start<k8s.CoreV1Event>(kc, '/api/v1/events');
  return {
    nodeClaims,
    nodes,
    events,
    stop() {
      nodeClaims.stop();
      nodes.stop();
      events.stop();
    },
  };
}

export const poolOf = (o: k8s.KubernetesObject): string | undefined => o.metadata?.labels?.[NODEPOOL_LABEL];
export const isReady = (n: k8s.V1Node): boolean => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
export const conditionOf = (n: k8s.V1Node, type: string): k8s.V1NodeCondition | undefined =>
  n.status?.conditions?.find((c) => c.type === type);

// ---- the self-healing scenario (shared by test/integration/karpenter-repair.test.ts and bench/karpenter.ts) ----

/** A pool's NodeClaims once each is registered (names its Node) and that Node is Ready (then Karpenter initializes it). */
export async function waitForPoolNodes(
  w: RepairWatches,
  pool: string,
  count: number,
  timeoutMs = 120_000,
): Promise<{ nodeClaims: string[]; nodes: string[]; firstClaimAt: number; readyAt: number }> {
  const claimAt = new Map<string, number>();
  const nodeOf = new Map<string, string>();
  const readyAt = new Map<string, number>();
  const registered = () => [...nodeOf.entries()].filter(([, node]) => readyAt.has(node));
  await waitFor(
    `${count} registered, Ready node(s) in NodePool ${pool}`,
    () => {
      for (const s of w.nodeClaims.seen) {
        const name = s.obj.metadata!.name!;
        if (poolOf(s.obj) !== pool || s.type === 'DELETED' || s.obj.metadata?.deletionTimestamp) continue;
        if (!claimAt.has(name)) claimAt.set(name, s.at);
        if (s.obj.status?.nodeName) nodeOf.set(name, s.obj.status.nodeName);
      }
      for (const s of w.nodes.seen) {
        const name = s.obj.metadata!.name!;
        if (poolOf(s.obj) === pool && s.type !== 'DELETED' && isReady(s.obj) && !readyAt.has(name)) readyAt.set(name, s.at);
      }
      return registered().length >= count;
    },
    timeoutMs,
    100,
  );
  const done = registered().slice(0, count);
  return {
    nodeClaims: done.map(([claim]) => claim),
    nodes: done.map(([, node]) => node),
    firstClaimAt: Math.min(...done.map(([claim]) => claimAt.get(claim)!)),
    readyAt: Math.max(...done.map(([, node]) => readyAt.get(node)!)),
  };
}

/** The NodeClaim whose status names this Node. */
export function nodeClaimOfNode(w: RepairWatches, node: string): string {
  const hit = [...w.nodeClaims.seen].reverse().find((s) => s.obj.status?.nodeName === node);
  if (!hit) throw new Error(`no NodeClaim names Node ${node}`);
  return hit.obj.metadata!.name!;
}

/** When the NodeClaim was marked for deletion (deletionTimestamp seen, or gone). */
export function nodeClaimDeleted(w: RepairWatches, name: string, timeoutMs: number): Promise<Seen<NodeClaim>> {
  return w.nodeClaims.waitFor(
    `NodeClaim ${name} deleted`,
    (s) => s.obj.metadata?.name === name && (s.type === 'DELETED' || !!s.obj.metadata?.deletionTimestamp),
    timeoutMs,
  );
}

/** A NodeClaim of the pool not in `known`, and its Node once Ready. */
export async function replacementFor(
  w: RepairWatches,
  pool: string,
  known: string[],
  timeoutMs: number,
): Promise<{ nodeClaim: string; claimAt: number; node: string; readyAt: number }> {
  const claim = await w.nodeClaims.waitFor(
    `a replacement NodeClaim in ${pool}`,
    (s) => poolOf(s.obj) === pool && s.type === 'ADDED' && !known.includes(s.obj.metadata!.name!),
    timeoutMs,
  );
  const name = claim.obj.metadata!.name!;
  const named = await w.nodeClaims.waitFor(
    `NodeClaim ${name} registered`,
    (s) => s.obj.metadata?.name === name && !!s.obj.status?.nodeName,
    timeoutMs,
  );
  const node = named.obj.status!.nodeName!;
  const ready = await w.nodes.waitFor(`replacement Node ${node} Ready`, (s) => s.obj.metadata?.name === node && isReady(s.obj), timeoutMs);
  return { nodeClaim: name, claimAt: claim.at, node, readyAt: ready.at };
}

/** The first watch event in which the Node has `type` with `status` (and a message containing `token`). */
export function nodeCondition(
  w: RepairWatches,
  node: string,
  type: string,
  status: string,
  timeoutMs: number,
  token = '',
): Promise<Seen<k8s.V1Node>> {
  return w.nodes.waitFor(
    `${type}=${status} on ${node}`,
    (s) => {
      if (s.obj.metadata?.name !== node) return false;
      const c = conditionOf(s.obj, type);
      return c?.status === status && (c.message ?? '').includes(token);
    },
    timeoutMs,
  );
}

export interface SelfHealingSteps {
  node: string;
  nodeClaim: string;
  pci: string;
  tolerationMs: number;
  /** Date.now() of each step, as seen on the API server's watch (fault = the write to /dev/kmsg). */
  at: {
    poolCreated: number;
    nodeClaimCreated: number;
    nodeReady: number;
    agentWriting: number;
    fault: number;
    conditionFalse: number;
    nodeClaimDeleted: number;
    replacementNodeClaim: number;
    replacementNodeReady: number;
  };
  /** lastTransitionTime of AcceleratedHardwareReady=False as written (second precision, as the API stores it). */
  lastTransitionTime: number;
  replacement: { nodeClaim: string; node: string };
}

/**
 * The whole loop on real parts: a static NodePool of one kwok node, a real Vigil agent for that Node reading the real
 * /dev/kmsg, a fatal Xid 79 written there, AcceleratedHardwareReady=False on the Node, Karpenter's repair deleting the
 * NodeClaim after the toleration, and a replacement NodeClaim whose Node becomes Ready. `duringToleration` runs once
 * the condition is False (the restart test stops and starts the agent there).
 */
export async function runSelfHealing(o: {
  cluster: TestCluster;
  karpenter: KarpenterUnderTest;
  watches: RepairWatches;
  pool: string;
  dir: string;
  startAgent: (node: string) => Promise<AgentProcess>;
  writeFault: (pci: string) => void;
  pci: string;
  /** Runs once the condition is False; returns the agent that runs from then on (a restarted one, say). */
  duringToleration?: (s: { node: string; agent: AgentProcess; conditionFalseAt: number }) => Promise<AgentProcess>;
}): Promise<SelfHealingSteps> {
  const { cluster, watches: w, pool } = o;
  const objects = karpenterObjects(cluster);
  const tolerationMs = o.karpenter.tolerationMs('AcceleratedHardwareReady');
  const poolCreated = Date.now();
  await objects.createNodeClass(pool);
  await objects.createStaticNodePool(pool, pool, 1);
  const up = await waitForPoolNodes(w, pool, 1);
  const node = up.nodes[0];
  const nodeClaim = nodeClaimOfNode(w, node);
  let agent = await o.startAgent(node);
  try {
    await agent.waitFor((l) => l.msg === 'writing node conditions', 30_000);
    const agentWriting = Date.now();
    const fault = Date.now();
    o.writeFault(o.pci);
    const falseSeen = await nodeCondition(w, node, 'AcceleratedHardwareReady', 'False', 30_000, o.pci);
    const lastTransitionTime = new Date(conditionOf(falseSeen.obj, 'AcceleratedHardwareReady')!.lastTransitionTime!).getTime();
    if (o.duringToleration) agent = await o.duringToleration({ node, agent, conditionFalseAt: falseSeen.at });
    const deleted = await nodeClaimDeleted(w, nodeClaim, tolerationMs + 120_000);
    // Bringing up the replacement is Karpenter's and KWOK's work, after the repair this checks: under a loaded
    // 2-core CI machine its registration once took over 120 s, so it gets longer.
    const replacement = await replacementFor(w, pool, [nodeClaim], 240_000);
    return {
      node,
      nodeClaim,
      pci: o.pci,
      tolerationMs,
      at: {
        poolCreated,
        nodeClaimCreated: up.firstClaimAt,
        nodeReady: up.readyAt,
        agentWriting,
        fault,
        conditionFalse: falseSeen.at,
        nodeClaimDeleted: deleted.at,
        replacementNodeClaim: replacement.claimAt,
        replacementNodeReady: replacement.readyAt,
      },
      lastTransitionTime,
      replacement: { nodeClaim: replacement.nodeClaim, node: replacement.node },
    };
  } finally {
    await agent.stop();
  }
}
