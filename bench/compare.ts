/**
 * `npm run bench:compare [-- --runs N]`: Vigil and node-problem-detector (NPD, built from its Go
 * module by bench/peers/build-npd.sh) side by side, through the same work in the same run, against
 * one real kube-apiserver (test/helpers/cluster.ts) on loopback. Each agent has its own Node and its
 * own identity. Writes bench/results/compare.json and docs/benchmarks.md.
 *
 * Method (every time is benchNow() in this process, ms with a fraction: the writer stamps the write,
 * the watch stamps the delivery, so both include the watch's own delivery delay equally; the storm's
 * writers, other processes, stamp with Date.now()):
 *
 * - Signals. One watch on the Nodes and one on core/v1 Events of `default` (bench/peers/observer.ts).
 *   A fault's "API-visible sign" is the first of: an Event on the agent's Node whose message names the
 *   fault's GPU (its unique PCI address), or a change of a Node condition whose message names it.
 *   NPD: its temporary NvidiaXid rule posts an Event on every Xid line; its permanent NvidiaXidFatal
 *   condition latches (True until restart) and names only the first GPU. Vigil: its Events for
 *   Warnings/Fatal findings and AcceleratedHardwareReady, whose message names failing GPUs.
 * - latency_p99_ms (first fault's condition): BENCH_EPISODES episodes; in each, both agents start
 *   fresh on fresh Nodes, then BENCH_FAULTS_PER_EPISODE Xid 79 lines, each on a new PCI address, are
 *   written to the real /dev/kmsg at random gaps (deterministic PRNG, 300-900 ms). The episode's first
 *   fault is timed to the condition: Vigil's AcceleratedHardwareReady=False, NPD's NvidiaXidFatal=True,
 *   message naming that GPU. Restarting per episode is what gives NPD's latching condition (and
 *   client-go's per-process Event spam filter: 25 then 1 per 5 min) a fresh start each time.
 * - later_fault_signal_p99_ms: every later fault of an episode, timed to its first API-visible sign
 *   (above). A fault with no sign within 10 s counts as 10 s (and in *_missed); a first-fault condition
 *   gets 30 s. An episode whose condition another writer of the shared ring set first (someone else's
 *   Xid on the agent's condition) is left out of the first-fault figures and listed.
 * - throughput_records_per_s, throughput_records_per_cpu_s, live_reader_records_per_s: one pass each
 *   over the same file (NPD with ONE config: its stock kernel rules and the Xid rules), and Vigil's live
 *   reader on the real /dev/kmsg; bench/throughput.ts (throughputPass) says how.
 * - idle_cpu_millicores, idle_rss_mib: each agent with its default monitors (Vigil: its default config;
 *   NPD: its stock kernel-monitor + readonly-monitor and the Xid monitor) on its own Node for the whole
 *   run (at least BENCH_IDLE_SECONDS, default 600, after a 90 s settle that covers start-up: Vigil's
 *   first run of every check is spread over 60 s); CPU from /proc/<pid>/stat,
 *   RSS the largest of 5 s samples. Their kernel-log source is a quiet one (Vigil: a FIFO nobody writes;
 *   NPD: its filelog plugin on an empty file), so this run's faults and storm, and other users of the
 *   shared ring, cannot cost either of them work or API writes.
 * - api_writes_per_node_hour (and api_requests_per_node_hour): from the apiserver's audit log (policy:
 *   Metadata for everything), the requests of each idle agent's own ServiceAccount in the idle window
 *   (writes: create/update/patch/delete), scaled to an hour. Same method for both.
 * - Storm: both agents live on fresh Nodes; under `flock /tmp/vigil-ring.lock`, BENCH_STORM_WRITERS
 *   processes write `<6>` noise at BENCH_STORM_RATE records/s in all for BENCH_STORM_SECONDS; writer 0
 *   writes one Xid 79 half-way. storm_xid_to_condition_ms: that write to the agent's condition naming the
 *   GPU (as for latency; 30 s counts as missed). Peak CPU: largest 250 ms /proc sample; peak RSS: VmHWM.
 *   Lost: Vigil's vigil_kmsg_lost_records_total; NPD counts none (null), its log is searched for
 *   "Kmsg channel closed". Healthy: a probe Xid 79 on a new GPU written 2 s after the storm shows an
 *   API-visible sign within 10 s, and the process is alive.
 * - distinct_fatal_visible_ratio: one long-lived pair of agents, BENCH_DISTINCT Xid 79 faults on distinct
 *   GPUs BENCH_DISTINCT_GAP_MS apart; the share with an API-visible sign within 1 s.
 * - stream_distinct_fatal_visible_ratio, burst_distinct_fatal_visible_ratio (bench/fatal-visibility.ts):
 *   a fresh long-lived pair each; 200 Xid 79 faults on distinct GPUs 0.5-2 s apart (about 4 min), and
 *   100 within one second; the share named (Event or condition) within 1 s, shipped Event budgets.
 * - first_signal_p50_ms, first_signal_p99_ms: each episode's first fault (a fresh agent's first) to
 *   the first API-visible sign of any kind (an Event or a condition naming the GPU), as for later faults.
 *
 * `ratio` is vigil / npd for every key (for latency, CPU, RSS, writes, lower is better; for
 * throughput and the visible ratio, higher). Several runs: each figure is the median over runs, and
 * the spread (min, max) is kept. BENCH_COMPARE_PHASES=latency,distinct,stream,burst,storm,throughput,idle
 * picks phases; set, it leaves the idle window out unless it names `idle`, and the keys it measured
 * replace theirs in the existing compare.json (the others stay, `key_measured` says when and on
 * which backend each replaced key was measured), e.g. BENCH_COMPARE_PHASES=stream,burst.
 *
 * Backend: the API server stores in a real etcd by default (test/cluster/up.sh --storage etcd), as
 * production clusters do; VIGIL_CLUSTER_STORAGE=kine runs it on kine (SQLite, one write at a time).
 * compare.json records it as `backend`, and Vigil's Event-first wait (src/sinks/kubernetes/sink.ts;
 * VIGIL_EVENT_FIRST_MAX_MS, inherited by the agents, 0 = off) as `event_first_max_ms`.
 * BENCH_COMPARE_OUT writes the JSON elsewhere (and leaves docs/benchmarks.md alone), for A/B runs.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, constants, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as k8s from '@kubernetes/client-node';
import { clusterStorage, startCluster, shippedClusterRoleRules, type TestCluster } from '../test/helpers/cluster.ts';
import { uniquePci, writeKmsg, type AgentProcess } from '../test/helpers/agent-process.ts';
import { percentile } from '../test/helpers/kmsg-burst.ts';
import { rng } from '../test/helpers/prng.ts';
import { buildDist } from './dist.ts';
import { cpuSeconds } from './idle.ts';
import { burstVisibility, streamVisibility, STREAM_FAULTS, BURST_FAULTS } from './fatal-visibility.ts';
import { mergeCompare } from './compare-merge.ts';
import { ApiObserver, benchNow, names, type Sign } from './peers/observer.ts';
import { buildNpd, NPD_VERSION, NPD_XID_CONDITION, startNpd, writeNpdConfigs, type NpdProcess } from './peers/npd.ts';
import { metricSum, startVigilAgent, VIGIL_XID_CONDITION } from './peers/vigil.ts';
import { execOut, throughputPass } from './throughput.ts';
import { ringLock } from './ring-lock.ts';
import { writeDocsSection } from './docs-section.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const env = (name: string, dflt: number): number => Number(process.env[name] ?? dflt);
const IDLE_SECONDS = env('BENCH_IDLE_SECONDS', 600);
const EPISODES = env('BENCH_EPISODES', 20);
const FAULTS_PER_EPISODE = env('BENCH_FAULTS_PER_EPISODE', 12);
const CORPUS_LINES = env('BENCH_CORPUS_LINES', 1_000_000);
const STORM_RATE = env('BENCH_STORM_RATE', 100_000);
const STORM_SECONDS = env('BENCH_STORM_SECONDS', 10);
const STORM_WRITERS = env('BENCH_STORM_WRITERS', 4);
const DISTINCT = env('BENCH_DISTINCT', 100);
const DISTINCT_GAP_MS = env('BENCH_DISTINCT_GAP_MS', 1200);
/**
 * Start-up is not idle: Vigil spreads the first run of its checks over a minute (and creates an
 * Event for each Warning this machine shows then), NPD posts its first status at start.
 */
const SETTLE_SECONDS = 90;
const SIGN_TIMEOUT_MS = 10_000;
const FIRST_TIMEOUT_MS = 30_000;
const BACKEND = clusterStorage('etcd');
const OUT = process.env.BENCH_COMPARE_OUT ?? path.join(ROOT, 'bench/results/compare.json');
const PHASES = new Set((process.env.BENCH_COMPARE_PHASES ?? 'latency,distinct,stream,burst,storm,throughput,idle').split(','));
/** Some phases only: their keys are merged into the existing compare.json. */
const PARTIAL = process.env.BENCH_COMPARE_PHASES !== undefined;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (x: number | null, d = 1): number | null => (x === null || !Number.isFinite(x) ? null : Math.round(x * 10 ** d) / 10 ** d);
const log = (msg: string) => process.stderr.write(`[bench:compare ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

type Agent = 'vigil' | 'npd';
type Figures = Record<string, Record<Agent, number | null>>;
interface RunResult {
  figures: Figures;
  notes: Record<string, unknown>;
}

function rssMiB(pid: number, field: 'VmRSS' | 'VmHWM' = 'VmRSS'): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

function alive(pid: number): boolean {
  return existsSync(`/proc/${pid}/status`) && !/State:\s+Z/.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
}

/** A fault line on a GPU no other writer of the shared ring uses. */
function xid79(pci: string, pid: number): string {
  return `NVRM: Xid (PCI:${pci}): 79, pid=${pid}, name=${BENCH_NAME}, GPU has fallen off the bus.`;
}

/** The process name in this bench's Xid lines; NPD's live Xid rules match only it (bench/peers/npd.ts). */
const BENCH_NAME = `vigilbench${randomBytes(3).toString('hex')}`;

/** RBAC for NPD's k8s exporter: its Node, its Node's status, core/v1 Events. */
const NPD_RULES: k8s.V1PolicyRule[] = [
  { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
  { apiGroups: [''], resources: ['nodes/status'], verbs: ['patch', 'update'] },
  { apiGroups: ['', 'events.k8s.io'], resources: ['events'], verbs: ['create', 'patch', 'update'] },
];

interface Ctx {
  cluster: TestCluster;
  obs: ApiObserver;
  npdBin: string;
  npdKubeconfig: string;
  dir: string;
  run: number;
  ports: { next: number };
  npdKmsgStartFailures: number;
}

interface Pair {
  vigil: AgentProcess;
  npd: NpdProcess;
  vNode: string;
  nNode: string;
  stop(): Promise<void>;
}

/** Both agents live on fresh Nodes, reading /dev/kmsg from now on; resolves once both have written their Node. */
async function startPair(c: Ctx, tag: string): Promise<Pair> {
  const vNode = `cmp-r${c.run}-${tag}-vigil`;
  const nNode = `cmp-r${c.run}-${tag}-npd`;
  await c.cluster.createNode(vNode);
  await c.cluster.createNode(nNode);
  const since = Date.now();
  const configs = writeNpdConfigs(c.dir, { kind: 'kmsg', onlyName: BENCH_NAME });
  const launch = () =>
    startNpd({
      bin: c.npdBin,
      configs,
      kubeconfig: c.npdKubeconfig,
      server: c.cluster.server,
      nodeName: nNode,
      prometheusPort: c.ports.next++,
    });
  let npd = launch();
  let vigil: AgentProcess;
  try {
    vigil = await startVigilAgent({
      dir: c.dir,
      name: `${tag}-r${c.run}`,
      kubeconfig: c.cluster.vigilKubeconfig,
      nodeName: vNode,
      mode: { kind: 'live' },
    });
  } catch (err) {
    await npd.stop();
    throw err;
  }
  const ready = await Promise.all([
    c.obs.first((s) => s.kind === 'condition' && s.node === nNode && s.what === NPD_XID_CONDITION, since, 60_000),
    c.obs.first((s) => s.kind === 'condition' && s.node === vNode && s.what === 'KernelReady', since, 60_000),
  ]);
  if (!ready[0] || !ready[1]) {
    await Promise.all([vigil.stop(), npd.stop()]);
    throw new Error(
      `agents did not write their Nodes within 60 s (npd: ${!!ready[0]}, vigil: ${!!ready[1]}); npd log: ${npd.lines.slice(-5).join(' | ')}`,
    );
  }
  // NPD opens /dev/kmsg with its lookback applied after its start-up; give both a moment.
  await sleep(1000);
  // NPD reads the ring from its oldest record; when other writers turn the ring over meanwhile, the
  // first read fails (EPIPE) and its kmsg watcher ends for good ("Kmsg channel closed"). Such a
  // start is counted and NPD started again, so the latency figures time a working NPD.
  for (let tries = 0; npd.lines.some((l) => l.includes('Kmsg channel closed')); tries++) {
    c.npdKmsgStartFailures++;
    await npd.stop();
    if (tries >= 5) throw new Error('NPD: its kmsg watcher died at start 6 times in a row');
    npd = launch();
    await npd.waitFor((l) => l.includes('K8s exporter started'), 60_000);
    await sleep(1500);
  }
  return {
    vigil,
    npd,
    vNode,
    nNode,
    async stop() {
      await Promise.all([vigil.stop(), npd.stop()]);
    },
  };
}

const firstCondition = (agent: Agent, node: string, pci: string) => (s: Sign) =>
  names(node, pci, ['condition'])(s) &&
  (agent === 'vigil' ? s.what === VIGIL_XID_CONDITION && s.status === 'False' : s.what === NPD_XID_CONDITION && s.status === 'True');

async function latencyPhase(
  c: Ctx,
  rand: () => number,
): Promise<{
  first: Record<Agent, number[]>;
  firstSign: Record<Agent, number[]>;
  later: Record<Agent, number[]>;
  missed: Record<string, number>;
  signKinds: Record<string, number>;
  excluded: { agent: Agent; episode: number; because: string }[];
  npdMissLog: string[];
}> {
  const first: Record<Agent, number[]> = { vigil: [], npd: [] };
  const firstSign: Record<Agent, number[]> = { vigil: [], npd: [] };
  const later: Record<Agent, number[]> = { vigil: [], npd: [] };
  const missed = { first_vigil: 0, first_npd: 0, later_vigil: 0, later_npd: 0 };
  // Which kind of sign came first for later faults (event or condition), per agent.
  const signKinds: Record<string, number> = {};
  const excluded: { agent: Agent; episode: number; because: string }[] = [];
  const npdMissLog: string[] = [];
  for (let e = 0; e < EPISODES; e++) {
    const episodeStart = Date.now();
    const pair = await startPair(c, `lat${e}`);
    try {
      const faults: { pci: string; at: number }[] = [];
      for (let f = 0; f < FAULTS_PER_EPISODE; f++) {
        await sleep(300 + rand() * 600);
        const pci = uniquePci();
        const at = benchNow();
        writeKmsg(xid79(pci, 1000 + f), 4);
        faults.push({ pci, at });
      }
      for (const [i, f] of faults.entries()) {
        for (const [agent, node] of [
          ['vigil', pair.vNode],
          ['npd', pair.nNode],
        ] as const) {
          if (i === 0) {
            // A fresh agent's first signal: the first sign of any kind (Event or condition) naming the GPU.
            const any = await c.obs.first(names(node, f.pci), f.at, Math.max(0, f.at + FIRST_TIMEOUT_MS - Date.now()));
            firstSign[agent].push(any ? any.at - f.at : FIRST_TIMEOUT_MS);
          }
          const pred = i === 0 ? firstCondition(agent, node, f.pci) : names(node, f.pci);
          // The first fault's condition gets longer: a late condition is a figure, not a miss.
          const limit = i === 0 ? FIRST_TIMEOUT_MS : SIGN_TIMEOUT_MS;
          const s = await c.obs.first(pred, f.at, Math.max(0, f.at + limit - Date.now()));
          if (i === 0 && !s) {
            // Another writer's Xid on the shared ring may have set the condition first (it latches in NPD).
            const other = c.obs.signs.find(
              (x) => x.node === node && x.at >= episodeStart && firstCondition(agent, node, '')(x) && !x.text.includes(f.pci),
            );
            if (other) {
              excluded.push({ agent, episode: e, because: other.text.slice(0, 200) });
              continue;
            }
            if (agent === 'npd') npdMissLog.push(...pair.npd.lines.filter((l) => /^[EW]\d{4}/.test(l)).slice(-5));
          }
          (i === 0 ? first : later)[agent].push(s ? s.at - f.at : limit);
          if (s && i > 0) signKinds[`${agent}_${s.kind}`] = (signKinds[`${agent}_${s.kind}`] ?? 0) + 1;
          if (!s) missed[`${i === 0 ? 'first' : 'later'}_${agent}`]++;
        }
      }
      log(
        `latency episode ${e + 1}/${EPISODES}: first vigil ${round(first.vigil.at(-1) ?? null)} ms, npd ${round(first.npd.at(-1) ?? null)} ms; later p50 vigil ${round(percentile(later.vigil, 50))}, npd ${round(percentile(later.npd, 50))}`,
      );
    } finally {
      await pair.stop();
    }
    c.obs.forget(Date.now() - 60_000);
  }
  return { first, firstSign, later, missed, signKinds, excluded, npdMissLog };
}

async function distinctPhase(c: Ctx): Promise<Record<Agent, { visible: number; latencies: number[] }>> {
  const pair = await startPair(c, 'distinct');
  const out: Record<Agent, { visible: number; latencies: number[] }> = {
    vigil: { visible: 0, latencies: [] },
    npd: { visible: 0, latencies: [] },
  };
  try {
    const faults: { pci: string; at: number }[] = [];
    for (let i = 0; i < DISTINCT; i++) {
      const pci = uniquePci();
      const at = benchNow();
      writeKmsg(xid79(pci, 2000 + i), 4);
      faults.push({ pci, at });
      await sleep(DISTINCT_GAP_MS);
    }
    await sleep(1000);
    for (const f of faults) {
      for (const [agent, node] of [
        ['vigil', pair.vNode],
        ['npd', pair.nNode],
      ] as const) {
        const s = c.obs.signs.find((x) => x.at >= f.at && names(node, f.pci)(x));
        const ms = s ? s.at - f.at : Infinity;
        out[agent].latencies.push(ms);
        if (ms <= 1000) out[agent].visible++;
      }
    }
  } finally {
    await pair.stop();
  }
  return out;
}

interface StormResult {
  written: number;
  rate: number;
  xid_to_condition_ms: Record<Agent, number | null>;
  xid_first_sign_ms: Record<Agent, number | null>;
  peak_cpu_millicores: Record<Agent, number>;
  peak_rss_mib: Record<Agent, number>;
  lost: Record<Agent, number | null>;
  healthy: Record<Agent, boolean>;
  busy_after_ms: Record<Agent, number | null>;
  npd_kmsg_channel_closed: boolean;
}

async function stormPhase(c: Ctx): Promise<StormResult> {
  const pair = await startPair(c, 'storm');
  try {
    const pids: Record<Agent, number> = { vigil: pair.vigil.child.pid!, npd: pair.npd.pid };
    const lost0 = metricSum(String(await pair.vigil.get('/metrics')), 'vigil_kmsg_lost_records_total');
    const pci = uniquePci();
    // CPU sampler: every 250 ms, per agent; keeps the series to find when each went quiet again.
    const samples: Record<Agent, { at: number; mc: number }[]> = { vigil: [], npd: [] };
    const prev = { vigil: cpuSeconds(pids.vigil), npd: cpuSeconds(pids.npd), at: Date.now() };
    const timer = setInterval(() => {
      const now = Date.now();
      for (const a of ['vigil', 'npd'] as const) {
        if (!alive(pids[a])) continue;
        const cpu = cpuSeconds(pids[a]);
        samples[a].push({ at: now, mc: ((cpu - prev[a]) / ((now - prev.at) / 1000)) * 1000 });
        prev[a] = cpu;
      }
      prev.at = now;
    }, 250);
    const lock = await ringLock();
    // Unlimited user writes for the storm (one open file per writer), restored after it.
    const devkmsg = '/proc/sys/kernel/printk_devkmsg';
    const devkmsgBefore = readFileSync(devkmsg, 'utf8').trim();
    writeFileSync(devkmsg, 'on\n');
    let results: { written: number; seconds: number; hiddenAt: number | null }[];
    let stormEnd: number;
    try {
      log(`storm: ${STORM_WRITERS} writers, ${STORM_RATE}/s for ${STORM_SECONDS} s`);
      const writers = Array.from({ length: STORM_WRITERS }, (_, i) =>
        execOut(process.execPath, [
          '--import',
          'tsx',
          path.join(ROOT, 'bench/peers/storm-writer.ts'),
          String(i),
          String(STORM_RATE / STORM_WRITERS),
          String(STORM_SECONDS),
          ...(i === 0 ? [xid79(pci, 4242)] : []),
        ]),
      );
      results = (await Promise.all(writers)).map((o) => JSON.parse(o) as { written: number; seconds: number; hiddenAt: number | null });
      stormEnd = Date.now();
    } finally {
      writeFileSync(devkmsg, `${devkmsgBefore}\n`);
      await lock.release();
    }
    const xidAt = results[0].hiddenAt!;
    const written = results.reduce((a, r) => a + r.written, 0);
    const cond: Record<Agent, number | null> = { vigil: null, npd: null };
    const sign: Record<Agent, number | null> = { vigil: null, npd: null };
    await Promise.all(
      (['vigil', 'npd'] as const).map(async (a) => {
        const node = a === 'vigil' ? pair.vNode : pair.nNode;
        const [s1, s2] = await Promise.all([
          c.obs.first(firstCondition(a, node, pci), xidAt, Math.max(0, xidAt + 30_000 - Date.now())),
          c.obs.first(names(node, pci), xidAt, Math.max(0, xidAt + 30_000 - Date.now())),
        ]);
        cond[a] = s1 ? s1.at - xidAt : null;
        sign[a] = s2 ? s2.at - xidAt : null;
      }),
    );
    // Health probe: a new GPU's Xid after the storm must still reach the API.
    await sleep(Math.max(0, stormEnd + 2000 - Date.now()));
    const probe = uniquePci();
    const probeAt = benchNow();
    writeKmsg(xid79(probe, 4343), 4);
    const healthy: Record<Agent, boolean> = { vigil: false, npd: false };
    await Promise.all(
      (['vigil', 'npd'] as const).map(async (a) => {
        const s = await c.obs.first(names(a === 'vigil' ? pair.vNode : pair.nNode, probe), probeAt, SIGN_TIMEOUT_MS);
        healthy[a] = !!s && alive(pids[a]);
      }),
    );
    await sleep(Math.max(0, stormEnd + 15_000 - Date.now()));
    clearInterval(timer);
    const busyAfter = (a: Agent): number | null => {
      // The first 1 s stretch (4 samples) after the storm under 50 millicores.
      const after = samples[a].filter((s) => s.at >= stormEnd);
      for (let i = 0; i + 3 < after.length; i++)
        if (after.slice(i, i + 4).every((s) => s.mc < 50)) return Math.max(0, after[i].at - 250 - stormEnd);
      return null;
    };
    const lost1 = alive(pids.vigil) ? metricSum(String(await pair.vigil.get('/metrics')), 'vigil_kmsg_lost_records_total') : NaN;
    return {
      written,
      rate: written / Math.max(...results.map((r) => r.seconds)),
      xid_to_condition_ms: cond,
      xid_first_sign_ms: sign,
      peak_cpu_millicores: { vigil: Math.max(0, ...samples.vigil.map((s) => s.mc)), npd: Math.max(0, ...samples.npd.map((s) => s.mc)) },
      peak_rss_mib: {
        vigil: alive(pids.vigil) ? rssMiB(pids.vigil, 'VmHWM') : NaN,
        npd: alive(pids.npd) ? rssMiB(pids.npd, 'VmHWM') : NaN,
      },
      lost: { vigil: lost1 - lost0, npd: null },
      healthy,
      busy_after_ms: { vigil: busyAfter('vigil'), npd: busyAfter('npd') },
      npd_kmsg_channel_closed: pair.npd.lines.some((l) => l.includes('Kmsg channel closed')),
    };
  } finally {
    await pair.stop();
  }
}

interface IdlePair {
  pids: Record<Agent, number>;
  users: Record<Agent, string>;
  stop(): Promise<void>;
}

async function startIdle(c: Ctx): Promise<IdlePair> {
  const vNode = `cmp-r${c.run}-idle-vigil`;
  const nNode = `cmp-r${c.run}-idle-npd`;
  await c.cluster.createNode(vNode);
  await c.cluster.createNode(nNode);
  const vSa = `idle-vigil-r${c.run}`;
  const nSa = `idle-npd-r${c.run}`;
  const vKube = await c.cluster.serviceAccountKubeconfig(vSa, shippedClusterRoleRules());
  const nKube = await c.cluster.serviceAccountKubeconfig(nSa, NPD_RULES);
  const fifo = path.join(c.dir, 'idle-kmsg.fifo');
  execFileSync('mkfifo', [fifo]);
  // Held open read-write so the agent's reader never sees the writer side close.
  const fifoFd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
  const empty = path.join(c.dir, 'idle-kern.log');
  writeFileSync(empty, '');
  const vigil = await startVigilAgent({
    dir: c.dir,
    name: `idle-r${c.run}`,
    kubeconfig: vKube,
    nodeName: vNode,
    mode: { kind: 'idle', kernelLogPath: fifo },
  });
  const npd = startNpd({
    bin: c.npdBin,
    configs: writeNpdConfigs(c.dir, { kind: 'file', path: empty }),
    kubeconfig: nKube,
    server: c.cluster.server,
    nodeName: nNode,
    prometheusPort: c.ports.next++,
  });
  return {
    pids: { vigil: vigil.child.pid!, npd: npd.pid },
    users: { vigil: `system:serviceaccount:vigil:${vSa}`, npd: `system:serviceaccount:vigil:${nSa}` },
    async stop() {
      await Promise.all([vigil.stop(), npd.stop()]);
      closeSync(fifoFd);
    },
  };
}

interface AuditEvent {
  auditID: string;
  stage: string;
  verb: string;
  user?: { username?: string };
  requestReceivedTimestamp: string;
}

/** Requests and writes per user in [from, to) from the apiserver's audit log. */
function auditCounts(file: string, users: string[], from: number, to: number): Record<string, { requests: number; writes: number }> {
  const seen = new Set<string>();
  const out = Object.fromEntries(users.map((u) => [u, { requests: 0, writes: 0 }]));
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue;
    const e = JSON.parse(line) as AuditEvent;
    const u = e.user?.username ?? '';
    if (!(u in out) || seen.has(e.auditID)) continue;
    const t = Date.parse(e.requestReceivedTimestamp);
    if (t < from || t >= to) continue;
    seen.add(e.auditID);
    out[u].requests++;
    if (['create', 'update', 'patch', 'delete'].includes(e.verb)) out[u].writes++;
  }
  return out;
}

async function oneRun(run: number, npdBin: string): Promise<RunResult> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-compare-'));
  const audit = path.join(dir, 'audit.log');
  const policy = path.join(dir, 'audit-policy.yaml');
  writeFileSync(policy, 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n');
  const extraBefore = process.env.VIGIL_APISERVER_EXTRA_ARGS;
  process.env.VIGIL_APISERVER_EXTRA_ARGS =
    `${extraBefore ?? ''} --audit-policy-file=${policy} --audit-log-path=${audit} --audit-log-format=json`.trim();
  const cluster = await startCluster({ storage: BACKEND });
  if (extraBefore === undefined) delete process.env.VIGIL_APISERVER_EXTRA_ARGS;
  else process.env.VIGIL_APISERVER_EXTRA_ARGS = extraBefore;
  const obs = new ApiObserver(cluster.admin.kc);
  const figures: Figures = {};
  const notes: Record<string, unknown> = {};
  let idle: IdlePair | undefined;
  try {
    await obs.start();
    const npdKubeconfig = await cluster.serviceAccountKubeconfig(`npd-r${run}`, NPD_RULES);
    const c: Ctx = {
      cluster,
      obs,
      npdBin,
      npdKubeconfig,
      dir,
      run,
      ports: { next: 21000 + run * 100 + Math.floor(Math.random() * 50) },
      npdKmsgStartFailures: 0,
    };
    idle = await startIdle(c);
    // The idle window opens once both agents are past start-up; the other phases go on meanwhile.
    const idleStart = Date.now() + SETTLE_SECONDS * 1000;
    const idlePids = idle.pids;
    const cpu0 = { vigil: 0, npd: 0 };
    const rss = { vigil: 0, npd: 0 };
    let rssTimer: NodeJS.Timeout | undefined;
    const settle = setTimeout(() => {
      cpu0.vigil = cpuSeconds(idlePids.vigil);
      cpu0.npd = cpuSeconds(idlePids.npd);
      rssTimer = setInterval(() => {
        for (const a of ['vigil', 'npd'] as const) if (alive(idlePids[a])) rss[a] = Math.max(rss[a], rssMiB(idlePids[a]));
      }, 5000);
    }, SETTLE_SECONDS * 1000);
    try {
      if (PHASES.has('latency')) {
        const l = await latencyPhase(c, rng(1000 + run));
        figures.latency_p50_ms = { vigil: percentile(l.first.vigil, 50), npd: percentile(l.first.npd, 50) };
        figures.latency_p99_ms = { vigil: percentile(l.first.vigil, 99), npd: percentile(l.first.npd, 99) };
        figures.first_signal_p50_ms = { vigil: percentile(l.firstSign.vigil, 50), npd: percentile(l.firstSign.npd, 50) };
        figures.first_signal_p99_ms = { vigil: percentile(l.firstSign.vigil, 99), npd: percentile(l.firstSign.npd, 99) };
        figures.later_fault_signal_p50_ms = { vigil: percentile(l.later.vigil, 50), npd: percentile(l.later.npd, 50) };
        figures.later_fault_signal_p95_ms = { vigil: percentile(l.later.vigil, 95), npd: percentile(l.later.npd, 95) };
        figures.later_fault_signal_p99_ms = { vigil: percentile(l.later.vigil, 99), npd: percentile(l.later.npd, 99) };
        notes.latency = {
          first_fault_samples: l.first.vigil.length,
          later_fault_samples: l.later.vigil.length,
          missed_within_10s: l.missed,
          later_first_sign_kinds: l.signKinds,
          first_fault_excluded: l.excluded,
          // Each episode's first signal, in order, to the 0.1 ms (what the percentiles are taken of).
          first_signal_ms: { vigil: l.firstSign.vigil.map((x) => round(x)), npd: l.firstSign.npd.map((x) => round(x)) },
          npd_errors_when_first_missed: l.npdMissLog,
        };
      }
      if (PHASES.has('distinct')) {
        const d = await distinctPhase(c);
        figures.distinct_fatal_visible_ratio = { vigil: d.vigil.visible / DISTINCT, npd: d.npd.visible / DISTINCT };
        const fin = (xs: number[]) => xs.filter(Number.isFinite);
        notes.distinct = {
          faults: DISTINCT,
          gap_ms: DISTINCT_GAP_MS,
          vigil_visible: d.vigil.visible,
          npd_visible: d.npd.visible,
          vigil_ever_visible: fin(d.vigil.latencies).length,
          npd_ever_visible: fin(d.npd.latencies).length,
        };
        log(`distinct: vigil ${d.vigil.visible}/${DISTINCT}, npd ${d.npd.visible}/${DISTINCT} visible within 1 s`);
      }
      for (const phase of ['stream', 'burst'] as const) {
        if (!PHASES.has(phase)) continue;
        const pair = await startPair(c, phase);
        let v: Awaited<ReturnType<typeof streamVisibility>>;
        try {
          // No other writer's storm may overwrite the faults meanwhile (as for the storm phase).
          const lock = await ringLock();
          try {
            const line = (pci: string, i: number) => xid79(pci, 3000 + i);
            v = phase === 'stream' ? await streamVisibility(obs, pair, rng(2000 + run), line) : await burstVisibility(obs, pair, line);
          } finally {
            await lock.release();
          }
        } finally {
          await pair.stop();
        }
        figures[`${phase}_distinct_fatal_visible_ratio`] = v.ratio;
        notes[phase] = v.notes;
        log(
          `${phase}: vigil ${v.ratio.vigil}, npd ${v.ratio.npd} of ${phase === 'stream' ? STREAM_FAULTS : BURST_FAULTS} visible within 1 s`,
        );
        c.obs.forget(Date.now() - 60_000);
      }
      if (PHASES.has('storm')) {
        const s = await stormPhase(c);
        figures.storm_xid_to_condition_ms = s.xid_to_condition_ms;
        figures.storm_xid_first_sign_ms = s.xid_first_sign_ms;
        figures.storm_peak_cpu_millicores = s.peak_cpu_millicores;
        figures.storm_peak_rss_mib = s.peak_rss_mib;
        figures.storm_records_lost = s.lost;
        figures.storm_busy_after_ms = s.busy_after_ms;
        notes.storm = {
          written: s.written,
          achieved_rate_per_s: Math.round(s.rate),
          healthy: s.healthy,
          npd_kmsg_channel_closed: s.npd_kmsg_channel_closed,
        };
        log(`storm: ${JSON.stringify(s)}`);
      }
      if (PHASES.has('throughput')) {
        // One pass each (NPD: one config), and Vigil's live reader: bench/throughput.ts.
        const t = await throughputPass({ dir: c.dir, npdBin: c.npdBin, nextPort: () => c.ports.next++ }, CORPUS_LINES);
        Object.assign(figures, t.figures);
        notes.throughput = t.notes;
      }
      // Some phases only, without 'idle': no idle window and no idle figures.
      if (!PHASES.has('idle')) {
        notes.npd_kmsg_start_failures = c.npdKmsgStartFailures;
        return { figures, notes };
      }
      // The idle window lasts at least IDLE_SECONDS, however quick the other phases were.
      const idleEnd = Math.max(Date.now(), idleStart + IDLE_SECONDS * 1000);
      await sleep(idleEnd - Date.now());
      const wall = (Date.now() - idleStart) / 1000;
      figures.idle_cpu_millicores = {
        vigil: ((cpuSeconds(idle.pids.vigil) - cpu0.vigil) / wall) * 1000,
        npd: ((cpuSeconds(idle.pids.npd) - cpu0.npd) / wall) * 1000,
      };
      figures.idle_rss_mib = rss;
      // Let the audit backend flush the window's last requests.
      await sleep(2000);
      const counts = auditCounts(audit, [idle.users.vigil, idle.users.npd], idleStart, idleStart + wall * 1000);
      const perHour = 3600 / wall;
      figures.api_writes_per_node_hour = { vigil: counts[idle.users.vigil].writes * perHour, npd: counts[idle.users.npd].writes * perHour };
      figures.api_requests_per_node_hour = {
        vigil: counts[idle.users.vigil].requests * perHour,
        npd: counts[idle.users.npd].requests * perHour,
      };
      notes.idle = { window_s: wall, audit: counts };
      notes.npd_kmsg_start_failures = c.npdKmsgStartFailures;
    } finally {
      clearTimeout(settle);
      clearInterval(rssTimer);
    }
  } finally {
    await idle?.stop().catch(() => undefined);
    obs.close();
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return { figures, notes };
}

function median(xs: number[]): number | null {
  const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (v.length === 0) return null;
  return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
}

function machine(): Record<string, string | number> {
  const cpu = /model name\s*:\s*(.*)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown';
  return {
    nproc: os.cpus().length,
    cpu,
    memory_gib: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    kernel: os.release(),
    node: process.version,
    npd: NPD_VERSION,
  };
}

const TARGETS: Record<string, string> = {
  latency_p99_ms: 'Vigil ≥ 10× lower than NPD',
  later_fault_signal_p99_ms: 'Vigil no slower than NPD',
  throughput_records_per_s: 'Vigil ≥ 3× NPD',
  idle_cpu_millicores: 'Vigil ≤ NPD',
  idle_rss_mib: 'Vigil ≤ 60 MiB',
  api_writes_per_node_hour: 'Vigil ≤ 12',
  storm_xid_to_condition_ms: 'Vigil ≤ 1000 ms',
  distinct_fatal_visible_ratio: 'Vigil 1.0',
  stream_distinct_fatal_visible_ratio: 'Vigil 1.0',
  burst_distinct_fatal_visible_ratio: 'Vigil 1.0',
  first_signal_p99_ms: 'Vigil ≤ NPD',
};

function fmt(x: number | null | undefined): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return '–';
  if (Math.abs(x) >= 1000) return Math.round(x).toLocaleString('en-US');
  if (Math.abs(x) >= 10) return x.toFixed(1);
  return x.toFixed(Math.abs(x) >= 1 ? 2 : 3);
}

function markdown(
  result: Record<string, unknown>,
  keys: string[],
  agg: Record<string, { vigil: number | null; npd: number | null; ratio: number | null }>,
  runs: RunResult[],
): string {
  const m = result.machine as Record<string, string | number>;
  const spread = (k: string, a: Agent) => {
    const v = runs.map((r) => r.figures[k]?.[a]).filter((x): x is number => typeof x === 'number' && Number.isFinite(x));
    return v.length ? `${fmt(Math.min(...v))}–${fmt(Math.max(...v))}` : '–';
  };
  // A storm Xid that never reached the API is a miss, not a missing figure.
  const cell = (k: string, x: number | null) => (x === null && k.startsWith('storm_xid') ? 'missed' : fmt(x));
  const rows = keys.map(
    (k) =>
      `| \`${k}\` | ${cell(k, agg[k].vigil)} | ${cell(k, agg[k].npd)} | ${fmt(agg[k].ratio)} | ${spread(k, 'vigil')} | ${spread(k, 'npd')} | ${TARGETS[k] ?? ''} |`,
  );
  const windows = runs.map((r) => fmt((r.notes.idle as { window_s?: number } | undefined)?.window_s ?? NaN)).join(', ');
  const perRun = runs.map((r, i) => `- Run ${i + 1}: \`${JSON.stringify(r.notes)}\``);
  return [
    '## Vigil and node-problem-detector side by side (`npm run bench:compare`)',
    '',
    `Measured ${String(result.measured_at).slice(0, 10)} on ${m.nproc} CPUs (${m.cpu}), ${m.memory_gib} GiB memory, Linux ${m.kernel}, Node ${m.node}; NPD ${m.npd} built from its Go module; the API server stores in ${(result.backend as string | undefined) ?? 'kine'} (Vigil's Event-first wait: ${(result.event_first_max_ms as string | undefined) ?? 'default'}). ${runs.length} runs; each figure is the median over runs, the spread columns give min–max over runs. Idle windows ${windows} s (BENCH_IDLE_SECONDS=${fmt(result.idle_seconds as number)}; each opens 90 s after start, past start-up, while the other phases run). \`ratio\` = Vigil / NPD. Method: the comment at the top of \`bench/compare.ts\`; raw figures and notes per run in \`bench/results/compare.json\`.`,
    '',
    '| key | Vigil | NPD | ratio | Vigil spread | NPD spread | target |',
    '| --- | ---: | ---: | ---: | ---: | ---: | --- |',
    ...rows,
    '',
    'Notes per run (sample counts, misses, storm rate and health, throughput wall times, audit counts):',
    '',
    ...perRun,
    '',
  ].join('\n');
}

/** `--render`: rewrites docs/benchmarks.md from bench/results/compare.json without measuring. */
function render(): void {
  const result = JSON.parse(readFileSync(path.join(ROOT, 'bench/results/compare.json'), 'utf8')) as Record<string, unknown> & {
    per_run: RunResult[];
  };
  const keys = [...new Set(result.per_run.flatMap((r) => Object.keys(r.figures)))];
  const agg = Object.fromEntries(keys.map((k) => [k, result[k] as { vigil: number | null; npd: number | null; ratio: number | null }]));
  writeDocsSection('compare', markdown(result, keys, agg, result.per_run));
}

async function main(): Promise<void> {
  if (process.argv.includes('--render')) return render();
  const i = process.argv.indexOf('--runs');
  const runs = i >= 0 ? Number(process.argv[i + 1]) : 2;
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs: expected a positive integer, got ${process.argv[i + 1]}`);
  if (process.getuid?.() !== 0) throw new Error('bench:compare writes to /dev/kmsg: run it as root');
  const npdBin = buildNpd();
  const fromDist = buildDist(log);
  const results: RunResult[] = [];
  for (let r = 0; r < runs; r++) {
    log(`run ${r + 1}/${runs}`);
    results.push(await oneRun(r, npdBin));
  }
  const keys = [...new Set(results.flatMap((r) => Object.keys(r.figures)))];
  const agg: Record<string, { vigil: number | null; npd: number | null; ratio: number | null }> = {};
  for (const k of keys) {
    const v = median(results.map((r) => r.figures[k]?.vigil ?? NaN));
    const n = median(results.map((r) => r.figures[k]?.npd ?? NaN));
    agg[k] = { vigil: round(v, 3), npd: round(n, 3), ratio: v !== null && n !== null && n !== 0 ? round(v / n, 3) : null };
  }
  const result = {
    measured_at: new Date().toISOString(),
    machine: machine(),
    runs: runs,
    idle_seconds: IDLE_SECONDS,
    vigil_from_dist: fromDist,
    ratio_means: 'vigil / npd',
    backend: BACKEND,
    event_first_max_ms: process.env.VIGIL_EVENT_FIRST_MAX_MS ?? 'default',
    ...agg,
    per_run: results.map((r) => ({ figures: r.figures, notes: r.notes })),
  };
  mkdirSync(path.join(ROOT, 'bench/results'), { recursive: true });
  // Some phases only: their keys replace those in the file, the others stay (with when each was measured).
  const file = process.env.BENCH_COMPARE_OUT ?? path.join(ROOT, 'bench/results/compare.json');
  if (PARTIAL) Object.assign(result, mergeCompare(file, result, keys));
  writeFileSync(OUT, JSON.stringify(result, null, 2) + '\n');
  if (process.env.BENCH_COMPARE_OUT === undefined) writeDocsSection('compare', markdown(result, keys, agg, results));
  if (PARTIAL && process.env.BENCH_COMPARE_OUT === undefined) render();
  console.log(JSON.stringify(agg, null, 2));
}

await main();
