/**
 * Helm values that would render but crash-loop every pod, or take away the safety net (issue #22
 * point 11): the real helm refuses them with a message naming the value, and every value it
 * accepts renders a configuration that the agent's own `vigil check-config` accepts. The agent is
 * the reference: each refused value is also shown to be refused by the agent (or to be the chart's
 * own rule), and the chart's constraints are compared with the agent's schema, not copied by hand.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import type * as k8s from '@kubernetes/client-node';
import { parseConfig } from '../../src/settings/index.ts';
import { SCHEMA, extraConfigSchema, schemaWithExtraConfig } from '../../scripts/gen-values-doc.ts';
import { CHART, HELM, ROOT, ensureTools, run, type Manifest } from './tools.ts';
import { tempDir } from '../helpers/temp-dir.ts';

// Only helm is needed here (ensureTools builds kubectl and the API server too when helm is missing).
before(() => {
  if (!existsSync(HELM)) ensureTools();
});

const DIR = tempDir('vigil-helm-values-');
let files = 0;

function valuesFile(values: Record<string, unknown>): string {
  const file = path.join(DIR, `values-${files++}.json`);
  writeFileSync(file, JSON.stringify(values));
  return file;
}

/** `helm template` with a values file and extra flags (--set ...): exit code and output. */
function template(values: Record<string, unknown>, flags: string[] = []) {
  return run(HELM, ['template', 'vigil', CHART, '--namespace', 'vigil', '-f', valuesFile(values), ...flags]);
}

/** The vigil.yaml the chart renders. */
function renderedConfig(out: string): string {
  const docs = YAML.parseAllDocuments(out).map((d) => d.toJS() as Manifest | null);
  const map = docs.find((d) => d?.kind === 'ConfigMap' && (d as unknown as k8s.V1ConfigMap).data?.['vigil.yaml']);
  const text = (map as unknown as k8s.V1ConfigMap | undefined)?.data?.['vigil.yaml'];
  assert.ok(text, 'a ConfigMap with vigil.yaml');
  return text;
}

/** `vigil check-config` on a configuration text, through the real CLI. */
function checkConfig(text: string) {
  const file = path.join(DIR, `vigil-${files++}.yaml`);
  writeFileSync(file, text);
  return run(process.execPath, [path.join(ROOT, 'bin/vigil.js'), 'check-config', file]);
}

const DEFAULT_CONFIG = () => YAML.parse(renderedConfig(template({}).out)) as Record<string, unknown>;

function merge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    const isMap = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
    out[k] = isMap(b) && isMap(v) ? merge(b, v) : v;
  }
  return out;
}

/** Whether the agent's configuration loader (what check-config and run use) accepts a config. */
function agentAccepts(config: Record<string, unknown>): boolean {
  try {
    parseConfig(YAML.stringify(config));
    return true;
  } catch {
    return false;
  }
}

interface Refused {
  values: Record<string, unknown>;
  /** What helm's message must say (names the value). */
  says: RegExp;
  /** The configuration change the value stands for, which the agent itself refuses; absent: the chart's own rule. */
  agent?: Record<string, unknown>;
}

const REFUSED: Record<string, Refused> = {
  'eventNamespace not a DNS label': {
    values: { eventNamespace: 'Bad_NS' },
    says: /eventNamespace/,
    agent: { kubernetes: { eventNamespace: 'Bad_NS' } },
  },
  'two condition types under one name': {
    values: { conditions: { names: { KernelReady: 'NodeHealthy', NetworkingReady: 'NodeHealthy' } } },
    says: /conditions\.names\.NetworkingReady: "NodeHealthy" is already the name of KernelReady/,
    agent: { conditions: { names: { KernelReady: 'NodeHealthy', NetworkingReady: 'NodeHealthy' } } },
  },
  "a rename onto another type's default name": {
    values: { conditions: { names: { StorageReady: 'KernelReady' } } },
    says: /conditions\.names\.StorageReady: "KernelReady" is already the name of KernelReady/,
    agent: { conditions: { names: { StorageReady: 'KernelReady' } } },
  },
  'a condition name the agent does not take': {
    values: { conditions: { names: { KernelReady: 'Vigil-Kernel' } } },
    says: /conditions\/names\/KernelReady/,
    agent: { conditions: { names: { KernelReady: 'Vigil-Kernel' } } },
  },
  'logLevel fatal': { values: { logLevel: 'fatal' }, says: /logLevel/, agent: { logLevel: 'fatal' } },
  'an Xid above 1000': { values: { xid: { fatal: [1001] } }, says: /xid\/fatal\/0/, agent: { xid: { fatal: [1001] } } },
  'an unknown extraConfig key': {
    values: { extraConfig: { engine: { repeatWindw: '2m' } } },
    says: /extraConfig\/engine.*repeatWindw/s,
    agent: { engine: { repeatWindw: '2m' } },
  },
  'an unknown extraConfig section': { values: { extraConfig: { enigne: {} } }, says: /extraConfig.*enigne/s, agent: { enigne: {} } },
  'an extraConfig duration that is not one': {
    values: { extraConfig: { engine: { repeatWindow: 'soon' } } },
    says: /extraConfig\/engine\/repeatWindow/,
    agent: { engine: { repeatWindow: 'soon' } },
  },
  'an extraConfig number out of range': {
    values: { extraConfig: { gpu: { pollJitter: 0.9 } } },
    says: /extraConfig\/gpu\/pollJitter/,
    agent: { gpu: { pollJitter: 0.9 } },
  },
  'an extraConfig value of the wrong type': {
    values: { extraConfig: { kubernetes: { eventsPerReasonPerMinute: 'many' } } },
    says: /extraConfig\/kubernetes\/eventsPerReasonPerMinute/,
    agent: { kubernetes: { eventsPerReasonPerMinute: 'many' } },
  },
  'extraConfig.listen on another port than the probes': {
    values: { extraConfig: { listen: '0.0.0.0:9000' } },
    says: /extraConfig\.listen: the chart sets this key from the value port/,
  },
  'extraConfig.quarantine.enabled, which would skip the chart quarantine checks and RBAC': {
    values: { extraConfig: { quarantine: { enabled: true } } },
    says: /extraConfig\.quarantine\.enabled: the chart sets this key from the value quarantine\.enabled/,
  },
  'extraConfig.kubernetes.mode off, which would stop every condition': {
    values: { extraConfig: { kubernetes: { mode: 'off' } } },
    says: /extraConfig\.kubernetes\.mode: the chart sets this key/,
  },
  'extraConfig.nodeName, one node for every pod': {
    values: { extraConfig: { nodeName: 'node-1' } },
    says: /extraConfig\.nodeName: the chart sets this key from each pod's NODE_NAME/,
  },
  'extraConfig.diagnostics.keep.maxBundles, which a value sets': {
    values: { extraConfig: { diagnostics: { keep: { maxBundles: 3 } } } },
    says: /extraConfig\.diagnostics\.keep\.maxBundles: the chart sets this key from the value diagnostics\.keep\.maxBundles/,
  },
  'diagnostics.autoCapture.enabled without an uploadUrl': {
    values: { diagnostics: { autoCapture: { enabled: true } } },
    says: /diagnostics\/autoCapture\/uploadUrl/,
    agent: { diagnostics: { autoCapture: { enabled: true } } },
  },
  'diagnostics.autoCapture.uploadUrl not a URL': {
    values: { diagnostics: { autoCapture: { uploadUrl: 'bundles.example.com' } } },
    says: /diagnostics\/autoCapture\/uploadUrl/,
    agent: { diagnostics: { autoCapture: { uploadUrl: 'bundles.example.com' } } },
  },
  'diagnostics.autoCapture.categories with an unknown category': {
    values: { diagnostics: { autoCapture: { categories: ['disk'] } } },
    says: /diagnostics\/autoCapture\/categories\/0/,
    agent: { diagnostics: { autoCapture: { categories: ['disk'] } } },
  },
  'diagnostics.keep.retention not a duration': {
    values: { diagnostics: { keep: { retention: 'a day' } } },
    says: /diagnostics\/keep\/retention/,
    agent: { diagnostics: { keep: { retention: 'a day' } } },
  },
  'diagnostics.uploadAttempts 0': {
    values: { diagnostics: { uploadAttempts: 0 } },
    says: /diagnostics\/uploadAttempts/,
    agent: { diagnostics: { uploadAttempts: 0 } },
  },
  'quarantine without the admission policy, not acknowledged': {
    values: { quarantine: { enabled: true }, admissionPolicy: false },
    says: /quarantine\/acknowledgeNoAdmissionPolicy': value must be true/,
  },
};

test('helm template refuses, and helm lint reports, each value the agent would refuse, or that removes the safety net, naming the value', () => {
  const defaults = DEFAULT_CONFIG();
  for (const [name, c] of Object.entries(REFUSED)) {
    const t = template(c.values);
    assert.notEqual(t.code, 0, `${name}: helm template accepted ${JSON.stringify(c.values)}`);
    assert.match(t.err, c.says, `${name}: ${t.err}`);
    // helm lint fails on a schema error; a template's `fail` it only logs (helm's lint mode, by design).
    const lint = run(HELM, ['lint', '--strict', CHART, '-f', valuesFile(c.values)]);
    const bySchema = /values don't meet the specifications of the schema/.test(t.err);
    assert.equal(lint.code !== 0, bySchema, `${name}: helm lint exited ${lint.code}`);
    // (the logged message has its quotes escaped)
    assert.match((lint.out + lint.err).replace(/\\"/g, '"'), c.says, `${name}: ${lint.out}${lint.err}`);
    // The value stands for a configuration the agent refuses at start: every pod would crash-loop.
    if (c.agent) assert.equal(agentAccepts(merge(defaults, c.agent)), false, `${name}: the agent accepts ${JSON.stringify(c.agent)}`);
  }
});

/** Values the chart takes; each must render a configuration the agent runs with. */
const ACCEPTED: Record<string, Record<string, unknown>> = {
  defaults: {},
  'eventNamespace kube-system': { eventNamespace: 'kube-system' },
  'eventNamespace of 63 characters': { eventNamespace: `n${'s'.repeat(62)}` },
  'eventNamespace starting with a digit': { eventNamespace: '0ns' },
  'every condition renamed': {
    conditions: {
      names: {
        KernelReady: 'VigilKernelReady',
        NetworkingReady: 'VigilNetworkingReady',
        StorageReady: 'VigilStorageReady',
        ContainerRuntimeReady: 'VigilContainerRuntimeReady',
        AcceleratedHardwareReady: 'VigilAcceleratedHardwareReady',
      },
    },
  },
  'two names swapped': { conditions: { names: { KernelReady: 'StorageReady', StorageReady: 'KernelReady' } } },
  'Xids at both ends': { xid: { fatal: [1, 1000], ignore: [13] } },
  'quarantine share 0': { quarantine: { enabled: true, maxQuarantinedShare: 0 } },
  'quarantine share 1': { quarantine: { enabled: true, maxQuarantinedShare: 1 } },
  'quarantine without the admission policy, acknowledged': {
    quarantine: { enabled: true, acknowledgeNoAdmissionPolicy: true },
    admissionPolicy: false,
  },
  'diagnostics: automatic capture to an in-VPC http destination, kept bundles bounded': {
    diagnostics: {
      autoCapture: {
        enabled: true,
        uploadUrl: 'http://minio.internal:9000/b/{node}-{time}.tar.gz',
        minInterval: 3600000,
        match: '^NvidiaXID',
      },
      upload: { allowedHosts: ['minio.internal'], allowHttp: true },
      keep: { maxBundles: 1, maxBytes: 1, retention: '1d' },
      uploadAttempts: 20,
      collectorTimeout: '1m',
    },
  },
  'quarantine dry run without the admission policy (no patch right)': {
    quarantine: { enabled: true, dryRun: true },
    admissionPolicy: false,
  },
  'extraConfig with options the chart does not set': {
    extraConfig: {
      engine: { repeatWindow: '2m', tick: 15000, flap: { maxActivations: 3 } },
      kernelLog: { lookback: '0', pcieCorrected: { count: 5 } },
      kubernetes: { heartbeat: '1h30m', eventsPerReasonPerMinute: 3 },
      gpu: { pollJitter: 0.5, expectedCount: null, thresholds: { nvlinkExpectedActive: 8, pcieReplayPerLanePerMinute: { 4: 2 } } },
      quarantine: { jitter: '5s' },
      monitors: {},
    },
  },
};

test('every logLevel the chart schema offers, and a matrix of accepted values, render a configuration that passes vigil check-config', () => {
  const schema = JSON.parse(readFileSync(SCHEMA, 'utf8')) as { properties: { logLevel: { enum: string[] } } };
  const cases = { ...ACCEPTED, ...Object.fromEntries(schema.properties.logLevel.enum.map((l) => [`logLevel ${l}`, { logLevel: l }])) };
  for (const [name, values] of Object.entries(cases)) {
    const t = template(values);
    assert.equal(t.code, 0, `${name}: ${t.err}`);
    const r = checkConfig(renderedConfig(t.out));
    assert.equal(r.code, 0, `${name}: vigil check-config: ${r.out}${r.err}`);
  }
});

test('helm and the agent agree on each eventNamespace, condition name, Xid, share and extraConfig duration of a matrix', () => {
  const defaults = DEFAULT_CONFIG();
  const cases: [Record<string, unknown>, Record<string, unknown>][] = [
    ...['default', 'a', '0', 'kube-system', 'x'.repeat(63), 'x'.repeat(64), 'Bad_NS', 'UPPER', '-a', 'a-', 'a.b', ''].map(
      (ns): [Record<string, unknown>, Record<string, unknown>] => [{ eventNamespace: ns }, { kubernetes: { eventNamespace: ns } }],
    ),
    ...['K', 'Vigil2', 'Vigil-Kernel', 'Vigil_Kernel', 'Vigil.Kernel', '2Kernel', 'Kernel Ready', ''].map(
      (n): [Record<string, unknown>, Record<string, unknown>] => [
        { conditions: { names: { KernelReady: n } } },
        { conditions: { names: { KernelReady: n } } },
      ],
    ),
    ...[0, 1, 1000, 1001, 1023, -1].map((x): [Record<string, unknown>, Record<string, unknown>] => [
      { xid: { fatal: [x] } },
      { xid: { fatal: [x] } },
    ]),
    ...[0, 0.3, 1, 1.5, -0.1].map((s): [Record<string, unknown>, Record<string, unknown>] => [
      { quarantine: { maxQuarantinedShare: s } },
      { quarantine: { maxQuarantinedShare: s } },
    ]),
    ...['0', '0ms', '250ms', '30s', '1h30m', '1.5h', '2d', ' 5m ', '5', '5 m', 'm', '1x', '-1s', '', 90000, 0, -1, 1.5].map(
      (d): [Record<string, unknown>, Record<string, unknown>] => [
        { extraConfig: { engine: { repeatWindow: d } } },
        { engine: { repeatWindow: d } },
      ],
    ),
    // A period that must be more than 0 (only "0s"-like strings are left to the agent).
    ...['0', 0, '1s', 1].map((d): [Record<string, unknown>, Record<string, unknown>] => [
      { extraConfig: { engine: { tick: d } } },
      { engine: { tick: d } },
    ]),
  ];
  for (const [values, config] of cases) {
    const agent = agentAccepts(merge(defaults, config));
    const t = template(values);
    assert.equal(
      t.code === 0,
      agent,
      `${JSON.stringify(values)}: helm ${t.code === 0 ? 'accepts' : 'refuses'}, the agent ${agent ? 'accepts' : 'refuses'}\n${t.err}`,
    );
  }
});

test('--set quarantine.maxQuarantinedShare=0.3 and other numeric --set values render as numbers the agent accepts', () => {
  for (const [flags, share] of [
    [['--set', 'quarantine.maxQuarantinedShare=0.3'], 0.3],
    [['--set', 'quarantine.maxQuarantinedShare=1'], 1],
    [['--set', 'quarantine.maxQuarantinedShare=0'], 0],
    [['--set-string', 'quarantine.maxQuarantinedShare=0.25'], 0.25],
    [['--set-json', 'quarantine.maxQuarantinedShare=0.5'], 0.5],
  ] as const) {
    const t = template({}, [...flags, '--set', 'quarantine.enabled=true', '--set', 'port=9470']);
    assert.equal(t.code, 0, `${flags.join(' ')}: ${t.err}`);
    const text = renderedConfig(t.out);
    const config = YAML.parse(text) as { quarantine: { maxQuarantinedShare: unknown }; listen: string };
    assert.equal(config.quarantine.maxQuarantinedShare, share, flags.join(' '));
    assert.equal(config.listen, '0.0.0.0:9470');
    const r = checkConfig(text);
    assert.equal(r.code, 0, `${flags.join(' ')}: ${r.out}${r.err}`);
  }
  const bad = template({}, ['--set', 'quarantine.maxQuarantinedShare=1.5']);
  assert.notEqual(bad.code, 0, 'a share above 1');
  assert.match(bad.err, /maxQuarantinedShare/);
});

interface JsonSchema {
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  [key: string]: unknown;
}

function at(schema: JsonSchema, dotted: string): JsonSchema {
  let node = schema;
  for (const key of dotted.split('.')) {
    const next = key === '[]' ? node.items : node.properties?.[key];
    assert.ok(next, `${dotted}: no ${key}`);
    node = next;
  }
  return node;
}

test("the chart's constraints on values that reach the agent are the agent's own, and the extraConfig schema is generated from it", () => {
  const text = readFileSync(SCHEMA, 'utf8');
  assert.equal(text, schemaWithExtraConfig(text), 'values.schema.json is stale: run `npx tsx scripts/gen-values-doc.ts --write`');
  const chart = JSON.parse(text) as JsonSchema;
  const agent = extraConfigSchema() as JsonSchema;
  const pairs: [string, string][] = [
    ['logLevel', 'logLevel'],
    ['eventNamespace', 'kubernetes.eventNamespace'],
    ['xid.fatal.[]', 'xid.fatal.[]'],
    ['xid.ignore.[]', 'xid.ignore.[]'],
    ['quarantine.maxQuarantinedShare', 'quarantine.maxQuarantinedShare'],
    ['quarantine.enabled', 'quarantine.enabled'],
    ['quarantine.dryRun', 'quarantine.dryRun'],
    ...['KernelReady', 'NetworkingReady', 'StorageReady', 'ContainerRuntimeReady', 'AcceleratedHardwareReady'].map(
      (t): [string, string] => [`conditions.names.${t}`, `conditions.names.${t}`],
    ),
    ...[
      'requests.enabled',
      'autoCapture.enabled',
      'autoCapture.categories.[]',
      'keep.maxBundles',
      'keep.maxBytes',
      'upload.allowedHosts.[]',
      'upload.allowHttp',
      'uploadAttempts',
    ].map((k): [string, string] => [`diagnostics.${k}`, `diagnostics.${k}`]),
  ];
  // Durations take the agent's two forms (milliseconds or text) with its patterns.
  for (const k of ['autoCapture.minInterval', 'keep.retention', 'collectorTimeout'])
    assert.deepEqual(at(chart, `diagnostics.${k}`).anyOf, at(agent, `diagnostics.${k}`).anyOf, `diagnostics.${k}`);
  for (const [value, key] of pairs) {
    const theirs = at(agent, key);
    // A value that also takes text (--set) is checked on its branch of the agent's type.
    const found = at(chart, value);
    const mine = (found.anyOf as JsonSchema[] | undefined)?.find((b) => b.type === theirs.type) ?? found;
    for (const rule of ['type', 'enum', 'pattern', 'minimum', 'maximum', 'minLength'])
      if (theirs[rule] !== undefined) assert.deepEqual(mine[rule], theirs[rule], `${value}.${rule} (the agent's ${key})`);
  }
});
