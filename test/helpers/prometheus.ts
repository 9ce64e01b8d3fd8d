/**
 * A real Prometheus (and promtool) for the deploy tests, built from the Go module proxy by
 * test/cluster/build-prometheus.sh and cached under .cache/ (built here on first use when missing).
 *
 * startPrometheus runs one on 127.0.0.1 with its data in a temporary directory, short scrape and
 * evaluation intervals and the given rule files; podMonitorScrapeConfig turns the chart's rendered
 * PodMonitor into the scrape job the Prometheus Operator would generate from it: pods found by
 * `kubernetes_sd_configs` (role pod) on the real API server, kept and labelled the same way.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestContext } from 'node:test';
import YAML from 'yaml';
import { helmTemplate, only } from '../deploy/tools.ts';
import { uniquePci, writeKmsg } from './agent-process.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function versionsVar(name: string): string {
  return execFileSync('bash', ['-c', `source test/cluster/versions.sh && printf %s "$${name}"`], { cwd: ROOT, encoding: 'utf8' });
}

export const PROMETHEUS = versionsVar('PROMETHEUS_BIN');
export const PROMTOOL = versionsVar('PROMTOOL_BIN');

function build(args: string[]): void {
  const r = spawnSync('bash', [path.join(ROOT, 'test/cluster/build-prometheus.sh'), ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`test/cluster/build-prometheus.sh failed:\n${r.stderr.slice(-4000)}`);
}

/** Builds promtool if it is not cached yet (minutes on a cold Go cache). */
export function ensurePromtool(): void {
  if (!existsSync(PROMTOOL)) build(['promtool']);
}

/** Builds prometheus and promtool if they are not cached yet. */
export function ensurePrometheus(): void {
  if (!existsSync(PROMETHEUS) || !existsSync(PROMTOOL)) build([]);
}

/** One series of an instant query's result. */
export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

/** An alert as `/api/v1/alerts` lists it. */
export interface Alert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing';
  activeAt: string;
  value: string;
}

export interface ScrapeTarget {
  labels: Record<string, string>;
  discoveredLabels: Record<string, string>;
  scrapeUrl: string;
  health: 'up' | 'down' | 'unknown';
  lastError: string;
}

export interface RunningPrometheus {
  url: string;
  dir: string;
  /** Instant query; throws on a query error. */
  query(expr: string): Promise<Sample[]>;
  alerts(): Promise<Alert[]>;
  targets(): Promise<ScrapeTarget[]>;
  /** Polls /api/v1/alerts until an alert named `name` in `state` has all of `labels`; returns it. */
  waitForAlert(name: string, state: Alert['state'], labels?: Record<string, string>, timeoutMs?: number): Promise<Alert>;
  /** Prometheus's own log so far (for failure messages). */
  log(): string;
  stop(): Promise<void>;
}

export interface PrometheusOptions {
  /** `scrape_configs` entries. */
  scrapeConfigs: Record<string, unknown>[];
  /** Rule files (paths) to load. */
  ruleFiles?: string[];
  /** Default 1s: alerts' `for` and rate windows in tests are seconds. */
  scrapeInterval?: string;
  evaluationInterval?: string;
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

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Starts Prometheus on 127.0.0.1 and waits until it is ready. Stop it in t.after. */
export async function startPrometheus(o: PrometheusOptions): Promise<RunningPrometheus> {
  ensurePrometheus();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-prometheus-'));
  const config = {
    global: { scrape_interval: o.scrapeInterval ?? '1s', scrape_timeout: '1s', evaluation_interval: o.evaluationInterval ?? '1s' },
    rule_files: o.ruleFiles ?? [],
    scrape_configs: o.scrapeConfigs,
  };
  const configFile = path.join(dir, 'prometheus.yml');
  writeFileSync(configFile, YAML.stringify(config));
  // The port is free when chosen but may be taken before Prometheus binds it: try again then.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    let out = '';
    const child: ChildProcess = spawn(
      PROMETHEUS,
      [
        `--config.file=${configFile}`,
        `--storage.tsdb.path=${path.join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--log.level=info',
      ],
      { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout!.on('data', (d) => (out += d));
    child.stderr!.on('data', (d) => (out += d));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    let ready = false;
    for (let i = 0; i < 300 && child.exitCode === null; i++) {
      try {
        ready = (await fetch(`${url}/-/ready`)).ok;
      } catch {
        // Not listening yet.
      }
      if (ready) break;
      await delay(100);
    }
    if (!ready) {
      child.kill('SIGKILL');
      await exited;
      if (attempt < 3 && /address already in use/.test(out)) continue;
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`prometheus did not become ready:\n${out.slice(-4000)}`);
    }
    const api = async <T>(p: string): Promise<T> => {
      const res = await fetch(`${url}${p}`);
      const body = (await res.json()) as { status: string; data: T; error?: string };
      if (body.status !== 'success') throw new Error(`GET ${p}: ${res.status} ${body.error ?? ''}`);
      return body.data;
    };
    const alerts = async () => (await api<{ alerts: Alert[] }>('/api/v1/alerts')).alerts;
    let stopped: Promise<void> | undefined;
    return {
      url,
      dir,
      async query(expr) {
        const data = await api<{ resultType: string; result: Sample[] }>(`/api/v1/query?query=${encodeURIComponent(expr)}`);
        if (data.resultType !== 'vector') throw new Error(`${expr}: a ${data.resultType}, not a vector`);
        return data.result;
      },
      alerts,
      async targets() {
        return (await api<{ activeTargets: ScrapeTarget[] }>('/api/v1/targets?state=active')).activeTargets;
      },
      async waitForAlert(name, state, labels = {}, timeoutMs = 60_000) {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const seen = (await alerts()).filter((a) => a.labels.alertname === name);
          const hit = seen.find((a) => a.state === state && Object.entries(labels).every(([k, v]) => a.labels[k] === v));
          if (hit) return hit;
          if (Date.now() > deadline) {
            throw new Error(
              `no ${state} ${name} ${JSON.stringify(labels)} after ${timeoutMs} ms; alerts named so: ${JSON.stringify(seen)}`,
            );
          }
          await delay(200);
        }
      },
      log: () => out,
      stop() {
        stopped ??= (async () => {
          if (child.exitCode === null && child.signalCode === null) {
            child.kill('SIGTERM');
            const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
            await exited;
            clearTimeout(timer);
          }
          rmSync(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
    };
  }
}

/** The chart's PodMonitor, as far as the scrape job depends on it. */
export interface PodMonitor {
  metadata: { name: string; namespace?: string };
  spec: {
    jobLabel?: string;
    selector: { matchLabels?: Record<string, string> };
    podMetricsEndpoints: {
      port: string;
      path?: string;
      interval?: string;
      relabelings?: { sourceLabels?: string[]; targetLabel?: string; regex?: string; action?: string; replacement?: string }[];
    }[];
  };
}

/** Prometheus's label name for a Kubernetes label (`app.kubernetes.io/name` -> `app_kubernetes_io_name`). */
const sanitize = (k: string) => k.replace(/[^a-zA-Z0-9_]/g, '_');

/**
 * The scrape job the Prometheus Operator generates from a PodMonitor's first endpoint: pods of the
 * PodMonitor's namespace discovered on the API server (CA and bearer token files), kept when their
 * labels match the selector and the container port has the endpoint's name, labelled with
 * namespace, pod, container, endpoint and (jobLabel) job, then the PodMonitor's own relabelings.
 */
export function podMonitorScrapeConfig(
  pm: PodMonitor,
  api: { server: string; caFile: string; tokenFile: string },
  scrapeInterval = '1s',
): Record<string, unknown> {
  const ns = pm.metadata.namespace ?? 'default';
  const ep = pm.spec.podMetricsEndpoints[0];
  if (!ep) throw new Error(`PodMonitor ${pm.metadata.name} has no podMetricsEndpoints`);
  const keep = Object.entries(pm.spec.selector.matchLabels ?? {}).map(([k, v]) => ({
    action: 'keep',
    source_labels: [`__meta_kubernetes_pod_label_${sanitize(k)}`, `__meta_kubernetes_pod_labelpresent_${sanitize(k)}`],
    regex: `(${v});true`,
  }));
  const own = (ep.relabelings ?? []).map((r) => ({
    ...(r.sourceLabels ? { source_labels: r.sourceLabels } : {}),
    ...(r.targetLabel ? { target_label: r.targetLabel } : {}),
    ...(r.regex ? { regex: r.regex } : {}),
    ...(r.replacement ? { replacement: r.replacement } : {}),
    ...(r.action ? { action: r.action.toLowerCase() } : {}),
  }));
  return {
    job_name: `podMonitor/${ns}/${pm.metadata.name}/0`,
    honor_labels: false,
    scrape_interval: scrapeInterval,
    metrics_path: ep.path ?? '/metrics',
    kubernetes_sd_configs: [
      {
        role: 'pod',
        api_server: api.server,
        namespaces: { names: [ns] },
        tls_config: { ca_file: api.caFile },
        authorization: { credentials_file: api.tokenFile },
      },
    ],
    relabel_configs: [
      ...keep,
      { action: 'drop', source_labels: ['__meta_kubernetes_pod_phase'], regex: '(Failed|Succeeded)' },
      { action: 'keep', source_labels: ['__meta_kubernetes_pod_container_port_name'], regex: ep.port },
      { source_labels: ['__meta_kubernetes_namespace'], target_label: 'namespace' },
      { source_labels: ['__meta_kubernetes_pod_container_name'], target_label: 'container' },
      { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
      { target_label: 'job', replacement: `${ns}/${pm.metadata.name}` },
      ...(pm.spec.jobLabel
        ? [
            {
              source_labels: [`__meta_kubernetes_pod_label_${sanitize(pm.spec.jobLabel)}`],
              target_label: 'job',
              regex: '(.+)',
              replacement: '${1}',
            },
          ]
        : []),
      { target_label: 'endpoint', replacement: ep.port },
      ...own,
    ],
  };
}

interface PrometheusRule {
  spec: { groups: { name: string; rules: Record<string, unknown>[] }[] };
}

/**
 * Renders the chart's PrometheusRule (prometheusRule.enabled, plus `values`) and writes its groups
 * as a Prometheus rule file at `file`; returns the groups.
 */
export function writeChartRules(file: string, values: Record<string, unknown> = {}): PrometheusRule['spec']['groups'] {
  const rule = only<PrometheusRule>(
    helmTemplate({ ...values, prometheusRule: { enabled: true, ...(values.prometheusRule as object) } }),
    'PrometheusRule',
  );
  writeFileSync(file, YAML.stringify({ groups: rule.spec.groups }));
  return rule.spec.groups;
}

/** One query of the Grafana dashboard, ready for Prometheus. */
export interface PanelQuery {
  panel: string;
  legend: string;
  expr: string;
}

interface Dashboard {
  panels: { title: string; targets: { expr: string; legendFormat?: string }[] }[];
  templating: { list: { name: string; type: string; allValue?: string; query?: { query: string } | string }[] };
}

/**
 * Every query of the chart's dashboard (deploy/helm/vigil/dashboards/vigil.json) as Grafana would
 * send it: each template variable replaced by its all-value, Grafana's interval macros by values
 * that suit a 1 s scrape; a `label_values(metric, label)` variable becomes `group by (label) (metric)`.
 */
export function dashboardQueries(): PanelQuery[] {
  const dash = JSON.parse(readFileSync(path.join(ROOT, 'deploy/helm/vigil/dashboards/vigil.json'), 'utf8')) as Dashboard;
  const vars = new Map<string, string>([
    ['__rate_interval', '1m'],
    ['__interval', '15s'],
    ['__range', '1h'],
  ]);
  const out: PanelQuery[] = [];
  for (const v of dash.templating.list) {
    if (v.type !== 'query') continue;
    if (v.allValue === undefined) throw new Error(`dashboard variable ${v.name} has no allValue`);
    vars.set(v.name, v.allValue);
    const q = typeof v.query === 'object' ? v.query.query : (v.query ?? '');
    const m = /^label_values\((\w+),\s*(\w+)\)$/.exec(q);
    if (!m) throw new Error(`dashboard variable ${v.name}: unexpected query ${q}`);
    out.push({ panel: `variable ${v.name}`, legend: '', expr: `group by (${m[2]}) (${m[1]})` });
  }
  const substitute = (expr: string) =>
    expr.replace(/\$\{(\w+)\}|\$(\w+)/g, (all, a?: string, b?: string) => {
      const value = vars.get((a ?? b)!);
      if (value === undefined) throw new Error(`dashboard query uses ${all}, which is not known here: ${expr}`);
      return value;
    });
  for (const p of dash.panels)
    for (const t of p.targets) out.push({ panel: p.title, legend: t.legendFormat ?? '', expr: substitute(t.expr) });
  return out;
}

/** Queries that count events (findings, Event writes): empty until the first one happens. */
export const AFTER_AN_EVENT = [/vigil_findings_total/, /vigil_k8s_event_writes_total/];

/** Fails with every dashboard query that returns no series (retrying for a while: rates need two scrapes). */
export async function assertDashboardNonEmpty(prom: RunningPrometheus, skip: RegExp[] = []): Promise<number> {
  const queries = dashboardQueries().filter((q) => !skip.some((r) => r.test(q.expr)));
  assert.ok(queries.length >= 15, `only ${queries.length} dashboard queries`);
  const deadline = Date.now() + 60_000;
  let empty: string[];
  for (;;) {
    empty = [];
    for (const q of queries) if ((await prom.query(q.expr)).length === 0) empty.push(`${q.panel}: ${q.expr}`);
    if (empty.length === 0 || Date.now() > deadline) break;
    await delay(1000);
  }
  assert.deepEqual(empty, [], 'dashboard queries without a series');
  return queries.length;
}

/**
 * Renders the chart's PodMonitor and alert rules (`for` = forSeconds) for `namespace` and starts a
 * Prometheus that discovers pods on the API server with them. The rule file lives in the returned
 * Prometheus's directory.
 */
export async function startChartPrometheus(o: {
  server: string;
  caFile: string;
  tokenFile: string;
  namespace: string;
  forSeconds: number;
}): Promise<RunningPrometheus> {
  const docs = helmTemplate({ podMonitor: { enabled: true } }, { namespace: o.namespace });
  const rulesDir = mkdtempSync(path.join(os.tmpdir(), 'vigil-prometheus-rules-'));
  const rules = path.join(rulesDir, 'vigil-rules.yaml');
  writeChartRules(rules, { prometheusRule: { for: `${o.forSeconds}s` } });
  const scrape = podMonitorScrapeConfig(only<PodMonitor>(docs, 'PodMonitor'), o);
  try {
    const prom = await startPrometheus({ scrapeConfigs: [scrape], ruleFiles: [rules] });
    return { ...prom, stop: () => prom.stop().finally(() => rmSync(rulesDir, { recursive: true, force: true })) };
  } catch (err) {
    rmSync(rulesDir, { recursive: true, force: true });
    throw err;
  }
}

/** The agent under watch: where it runs and how to stop it while its Pod stays (so its target stays). */
export interface WatchedAgent {
  node: string;
  namespace: string;
  pod: string;
  container: string;
  /** `host:port` Prometheus scrapes. */
  instance: string;
  /** The Node's condition of this type, as the API server has it. */
  condition(type: string): Promise<{ status: string; message?: string } | undefined>;
  /** Makes /metrics stop answering while the Pod object remains. */
  stop(): Promise<void>;
}

/**
 * The end-to-end checks of the chart's monitoring, as subtests of `t`: the agent's target is found
 * through kubernetes_sd and labelled as the PodMonitor says; every dashboard query has a series
 * (idle: all but those that count events; after a fault: all); the idle lag panel is under 50 ms;
 * an Xid 79 written to the real /dev/kmsg fires VigilNodeConditionFailing, not before its `for`;
 * stopping the agent fires VigilAgentDown. Used against a Pod object (test/deploy/prometheus.test.ts)
 * and the chart's real pod on a kubelet.
 */
export async function checkChartMonitoring(
  t: TestContext,
  prom: RunningPrometheus,
  agent: WatchedAgent,
  forSeconds: number,
): Promise<void> {
  const { node } = agent;
  await t.test('Prometheus finds the agent through kubernetes_sd on the API server, labelled as the PodMonitor says', async () => {
    let up: Sample | undefined;
    const deadline = Date.now() + 60_000;
    while (!(up = (await prom.query(`up{pod="${agent.pod}"} == 1`))[0]) && Date.now() < deadline) await delay(500);
    assert.ok(up, `no target up for ${agent.pod}; targets: ${JSON.stringify(await prom.targets())}\n${prom.log().slice(-3000)}`);
    assert.deepEqual(up.metric, {
      __name__: 'up',
      job: 'vigil',
      node,
      namespace: agent.namespace,
      pod: agent.pod,
      container: agent.container,
      endpoint: 'http',
      instance: agent.instance,
    });
  });

  await t.test('every dashboard query has a series on the idle agent, but those that count events', async () => {
    await assertDashboardNonEmpty(prom, AFTER_AN_EVENT);
  });

  await t.test('the idle agent’s event-loop lag panel shows less than 50 ms, not the 1 s sampling period', async () => {
    const panel = dashboardQueries().find((q) => q.expr.includes('eventloop_lag'));
    assert.ok(panel, 'no event-loop lag panel');
    // A loaded test machine may delay one sample; the panel must settle below 50 ms.
    let last: string[];
    const deadline = Date.now() + 30_000;
    for (;;) {
      const r = await prom.query(panel.expr);
      last = r.map((s) => s.value[1]);
      if ((r.length === 1 && Number(last[0]) < 0.05) || Date.now() > deadline) break;
      await delay(1000);
    }
    assert.equal(last.length, 1, `${panel.expr}: ${last.length} series`);
    assert.ok(Number(last[0]) < 0.05, `${panel.expr} = ${last[0]} s`);
  });

  await t.test('a Fatal fault in the kernel log fires VigilNodeConditionFailing after its for', async () => {
    const pci = uniquePci();
    const wrote = Date.now();
    writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.`);
    const deadline = Date.now() + 60_000;
    let c: Awaited<ReturnType<WatchedAgent['condition']>>;
    while (!((c = await agent.condition('AcceleratedHardwareReady'))?.status === 'False' && c?.message?.includes(pci))) {
      assert.ok(Date.now() < deadline, `the Node does not show the fault: ${JSON.stringify(c)}`);
      await delay(200);
    }
    const labels = { job: 'vigil', node, condition: 'AcceleratedHardwareReady', severity: 'critical' };
    const seen: Alert['state'][] = [];
    const early: Alert[] = [];
    let firing: Alert | undefined;
    while (!firing) {
      assert.ok(Date.now() < deadline, `not firing; states seen: ${seen.join(',')}; alerts: ${JSON.stringify(await prom.alerts())}`);
      const a = (await prom.alerts()).find(
        (x) => x.labels.alertname === 'VigilNodeConditionFailing' && Object.entries(labels).every(([k, v]) => x.labels[k] === v),
      );
      if (a) {
        seen.push(a.state);
        // Never firing before `for` has passed since it became active.
        if (a.state === 'firing' && Date.now() - Date.parse(a.activeAt) < forSeconds * 1000) early.push(a);
        if (a.state === 'firing') firing = a;
      }
      await delay(200);
    }
    assert.deepEqual(early, [], 'firing before its for');
    // Pending first, unless another test's fault made it active before this one.
    if (Date.parse(firing.activeAt) >= wrote) assert.equal(seen[0], 'pending', seen.join(','));
    assert.match(firing.annotations.summary ?? '', new RegExp(`Node ${node} is not ready`));
  });

  await t.test('every dashboard query has a series once a fault has happened', async () => {
    await assertDashboardNonEmpty(prom);
  });

  await t.test('an agent that stops answering fires VigilAgentDown after its for', async () => {
    await agent.stop();
    const labels = { job: 'vigil', node, pod: agent.pod, severity: 'warning' };
    const pending = await prom.waitForAlert('VigilAgentDown', 'pending', labels, 30_000);
    const firing = await prom.waitForAlert('VigilAgentDown', 'firing', labels, 60_000);
    assert.equal(firing.activeAt, pending.activeAt);
    assert.ok(Date.now() - Date.parse(firing.activeAt) >= forSeconds * 1000, JSON.stringify(firing));
    assert.equal((await prom.query(`up{pod="${agent.pod}"}`))[0]?.value[1], '0');
  });
}
