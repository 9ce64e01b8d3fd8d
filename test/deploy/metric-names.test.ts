/**
 * Every metric the Grafana dashboard and the PrometheusRule alerts query is one a running agent
 * really exports: a real `vigil run` reporting to a real API server is scraped, and each name used
 * in deploy/helm/vigil/dashboards/vigil.json and the chart's rendered alert rules must appear in
 * its /metrics. Its metric names also follow Prometheus conventions.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startAgent, uniquePci, writeKmsg } from '../helpers/agent-process.ts';
import { startCluster, waitFor } from '../helpers/cluster.ts';
import { CHART, ensureTools, helmTemplate, only } from './tools.ts';
import { tempDir } from '../helpers/temp-dir.ts';

before(() => ensureTools());

/** Series Prometheus makes itself for every target, not exported by Vigil. */
const SYNTHESIZED = new Set(['up']);
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan']);

/** Metric names in a PromQL expression: identifiers that are not functions, aggregations, labels or keywords. */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const after = bare.slice(m.index + m[0].length);
    if (/^\s*\(/.test(after) || KEYWORDS.has(m[0].toLowerCase())) continue;
    names.add(m[0]);
  }
  return [...names];
}

interface Dashboard {
  panels: { targets: { expr: string }[] }[];
  templating: { list: { type: string; query?: { query: string } | string }[] };
}

interface PrometheusRule {
  spec: { groups: { rules: { expr: string }[] }[] };
}

function dashboardExprs(): string[] {
  const dash = JSON.parse(readFileSync(path.join(CHART, 'dashboards/vigil.json'), 'utf8')) as Dashboard;
  const exprs = dash.panels.flatMap((p) => p.targets.map((t) => t.expr));
  for (const v of dash.templating.list) {
    if (v.type === 'query' && typeof v.query === 'object') exprs.push(v.query.query.replace(/^label_values\((\w+),.*\)$/, '$1'));
  }
  return exprs;
}

function alertExprs(): string[] {
  const rule = only<PrometheusRule>(helmTemplate({ prometheusRule: { enabled: true } }), 'PrometheusRule');
  return rule.spec.groups.flatMap((g) => g.rules.map((r) => r.expr));
}

test('metricNames reads the names out of PromQL', () => {
  assert.deepEqual(metricNames('sum by (reason) (rate(vigil_findings_total{node=~"$node", a="b{c}"}[5m]))'), ['vigil_findings_total']);
  assert.deepEqual(metricNames('vigil_source_up == 0 or vigil_component_health == 2'), ['vigil_source_up', 'vigil_component_health']);
  assert.deepEqual(metricNames('up{job="vigil"} == 0'), ['up']);
});

test('every metric in the dashboard and the alert rules is exported by a running agent', { timeout: 180_000 }, async (t) => {
  const cluster = await startCluster();
  const dir = tempDir('vigil-metric-names-');
  t.after(async () => {
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const node = 'metric-names';
  await cluster.createNode(node);
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(
    config,
    ['kernelLog:', '  lookback: "0"', 'gpu:', '  enabled: false', 'monitors:', '  scheduler: {startupJitter: 0}', ''].join('\n'),
  );
  const flags = {
    '--kubeconfig': cluster.vigilKubeconfig,
    '--node-name': node,
    '--state-dir': path.join(dir, 'state'),
    '--config': config,
  };
  const agent = await startAgent(Object.entries(flags).flat());
  t.after(() => agent.stop());
  // A finding and a condition write, so labelled series have samples too.
  const pci = uniquePci();
  writeKmsg(`NVRM: Xid (PCI:${pci}): 48, pid=1, name=metric-names, DBE (0x1,0x2)`);
  const scrape = async () => String(await agent.get('/metrics'));
  await waitFor(
    'a condition write and a host check in /metrics',
    async () => {
      const text = await scrape();
      return /^vigil_k8s_condition_writes_total\{result="ok"\}/m.test(text) && /^vigil_check_runs_total\{/m.test(text) && text;
    },
    90_000,
    500,
  );
  const text = await scrape();
  const exported = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    exported.add(m[1]);
    if (m[2] === 'histogram' || m[2] === 'summary') for (const s of ['_sum', '_count', '_bucket']) exported.add(m[1] + s);
  }
  for (const m of text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/gm)) exported.add(m[1]);

  const used = new Map<string, string>();
  for (const e of dashboardExprs()) for (const n of metricNames(e)) used.set(n, `dashboard: ${e}`);
  for (const e of alertExprs()) for (const n of metricNames(e)) used.set(n, `alert: ${e}`);
  assert.ok(used.size >= 15, `only ${used.size} names found: ${[...used.keys()].join(', ')}`);
  const missing = [...used].filter(([n]) => !exported.has(n) && !SYNTHESIZED.has(n)).map(([n, where]) => `${n} (${where})`);
  assert.deepEqual(missing, [], 'metrics queried but not exported');

  // Prometheus conventions: one prefix, snake case, counters end in _total, no doubled words.
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [name, type] = [m[1], m[2]];
    assert.match(name, /^vigil_[a-z0-9]+(_[a-z0-9]+)*$/, name);
    assert.doesNotMatch(name, /(^|_)([a-z]+)_\2(_|$)/, `${name} repeats a word`);
    if (type === 'counter') assert.match(name, /_total$/, `counter ${name}`);
  }
});
