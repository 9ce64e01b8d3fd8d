/**
 * The chart's alert rules, checked by the real promtool (built from the Go module proxy by
 * test/cluster/build-prometheus.sh): the rendered PrometheusRule's groups are a valid rule file,
 * and the unit tests in test/deploy/prometheus/vigil-rules.test.yaml (one group per alert: fires
 * with its labels after `for`, not before and not on healthy series) pass against it.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { PROMTOOL, ensurePromtool, writeChartRules } from '../helpers/prometheus.ts';
import { ROOT, ensureTools, helmTemplate, only, run, type Manifest } from './tools.ts';

const UNIT_TESTS = path.join(ROOT, 'test/deploy/prometheus/vigil-rules.test.yaml');

before(() => {
  ensureTools();
  ensurePromtool();
});

interface UnitTests {
  rule_files: string[];
  tests: {
    name: string;
    input_series: { series: string; values: string }[];
    alert_rule_test: { alertname: string; exp_alerts: { exp_labels: Record<string, string> }[] }[];
  }[];
}

/** A temporary directory holding the rendered rules under the name the unit tests load, and the unit tests. */
function workdir(t: { after(fn: () => void): void }, values: Record<string, unknown> = {}) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-promtool-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const unit = YAML.parse(readFileSync(UNIT_TESTS, 'utf8')) as UnitTests;
  const rules = path.join(dir, unit.rule_files[0]);
  const groups = writeChartRules(rules, values);
  const tests = path.join(dir, path.basename(UNIT_TESTS));
  copyFileSync(UNIT_TESTS, tests);
  return { dir, rules, tests, groups, unit };
}

test('the rendered alert rules pass promtool check rules', (t) => {
  const { rules, groups } = workdir(t);
  const r = run(PROMTOOL, ['check', 'rules', rules]);
  assert.equal(r.code, 0, r.out + r.err);
  const alerts = groups.flatMap((g) => g.rules).length;
  assert.match(r.out + r.err, new RegExp(`SUCCESS: ${alerts} rules found`));
});

test('every alert fires with its labels after its for, and not before it or on healthy series (promtool test rules)', (t) => {
  const { tests, groups, unit } = workdir(t);
  const r = run(PROMTOOL, ['test', 'rules', tests]);
  assert.equal(r.code, 0, r.out + r.err);
  // One unit-test group per alert, each with a case where it fires and one where it does not.
  const alerts = groups.flatMap((g) => g.rules.map((x) => String(x.alert))).sort();
  assert.deepEqual(unit.tests.map((g) => g.name).sort(), alerts);
  for (const g of unit.tests) {
    const cases = g.alert_rule_test.filter((c) => c.alertname === g.name);
    assert.ok(
      cases.some((c) => c.exp_alerts.length > 0),
      `${g.name}: no case where it fires`,
    );
    assert.ok(
      cases.some((c) => c.exp_alerts.length === 0),
      `${g.name}: no case where it does not fire`,
    );
  }
});

test("the agent-down alert watches the job label the chart's PodMonitor and ServiceMonitor give the agent's series", (t) => {
  const docs = helmTemplate({ podMonitor: { enabled: true }, serviceMonitor: { enabled: true }, prometheusRule: { enabled: true } });
  interface Monitor {
    kind: string;
    spec: { jobLabel: string };
  }
  const ds = only<{ spec: { template: { metadata: { labels: Record<string, string> } } } }>(docs, 'DaemonSet');
  const svc = only<Manifest>(docs, 'Service');
  // The Prometheus Operator takes `job` from the pod's label (PodMonitor) or the Service's (ServiceMonitor) named by jobLabel.
  const jobs = new Set<string>();
  for (const m of docs.filter((d) => d.kind === 'PodMonitor' || d.kind === 'ServiceMonitor') as unknown as Monitor[]) {
    const labels = m.kind === 'PodMonitor' ? ds.spec.template.metadata.labels : (svc.metadata.labels ?? {});
    const job = labels[m.spec.jobLabel];
    assert.ok(job, `${m.kind} jobLabel ${m.spec.jobLabel} is not a label of what it scrapes`);
    jobs.add(job);
  }
  assert.equal(jobs.size, 1, [...jobs].join(', '));
  const job = [...jobs][0];
  const rule = only<{ spec: { groups: { rules: { alert: string; expr: string }[] }[] } }>(docs, 'PrometheusRule');
  const down = rule.spec.groups.flatMap((g) => g.rules).find((r) => r.alert === 'VigilAgentDown');
  assert.equal(down?.expr, `up{job="${job}"} == 0`);
  // The unit test's firing series carries that job too.
  const { unit } = workdir(t);
  const upSeries = unit.tests.find((g) => g.name === 'VigilAgentDown')!.input_series.map((s) => s.series);
  assert.ok(
    upSeries.some((s) => s.includes(`job="${job}"`)),
    upSeries.join('\n'),
  );
});

test('promtool fails a rule file with a broken expression, and unit tests whose alert timing no longer holds', (t) => {
  const { dir, rules, tests } = workdir(t);
  const broken = path.join(dir, 'broken.yaml');
  writeFileSync(broken, readFileSync(rules, 'utf8').replace('vigil_condition_status == 0', 'vigil_condition_status == (0'));
  const check = run(PROMTOOL, ['check', 'rules', broken]);
  assert.notEqual(check.code, 0, check.out);
  assert.match(check.out + check.err, /VigilNodeConditionFailing|parse error/i);

  // Rules rendered with a shorter `for` fire before the unit tests allow: the harness must say so.
  writeChartRules(rules, { prometheusRule: { for: '1m' } });
  const r = run(PROMTOOL, ['test', 'rules', tests]);
  assert.notEqual(r.code, 0, r.out);
  assert.match(r.out + r.err, /VigilNodeConditionFailing/);
});
