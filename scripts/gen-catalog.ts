/**
 * Generates src/catalog/reasons.generated.ts and docs/reasons.md from catalog/reasons.yaml, and
 * guards the public API snapshot (catalog/api-snapshot.json). Also runs scripts/gen-errors.ts
 * (docs/errors.md and its snapshot) with the same flags.
 *
 *   tsx scripts/gen-catalog.ts                     write generated files; fail on an API break
 *   tsx scripts/gen-catalog.ts --check             fail if generated files are stale or the API broke
 *   tsx scripts/gen-catalog.ts --update-snapshot   accept the current API (breaking: add a CHANGELOG entry)
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import YAML from 'yaml';
import { catalogYaml, type CatalogYaml } from '../src/catalog/schema.ts';
import { parseDuration } from '../src/util/duration.ts';
import { genErrors } from './gen-errors.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const paths = {
  yaml: path.join(root, 'catalog/reasons.yaml'),
  snapshot: path.join(root, 'catalog/api-snapshot.json'),
  ts: path.join(root, 'src/catalog/reasons.generated.ts'),
  md: path.join(root, 'docs/reasons.md'),
};

export function loadCatalogYaml(text: string): CatalogYaml {
  const parsed = catalogYaml.safeParse(YAML.parse(text));
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new Error(`catalog/reasons.yaml is invalid:\n${lines.join('\n')}`);
  }
  const cat = parsed.data;
  for (const [name, r] of Object.entries(cat.reasons)) {
    if (!/^(?:[A-Z]|\{[a-z]+\})[A-Za-z0-9]*(\{[a-z]+\}[A-Za-z0-9]*)*$/.test(name))
      throw new Error(`reason ${name}: name must be PascalCase`);
    if (!(r.condition in cat.conditions)) throw new Error(`reason ${name}: unknown condition ${r.condition}`);
    const params = [...name.matchAll(/\{([a-z]+)\}/g)].map((m) => m[1]);
    const declared = Object.keys(r.template ?? {});
    if (params.join() !== declared.join()) {
      throw new Error(
        `reason ${name}: template parameters ${params.join(',') || '(none)'} do not match template: ${declared.join(',') || '(none)'}`,
      );
    }
    if (typeof r.recovery === 'object' && 'ttl' in r.recovery && parseDuration(r.recovery.ttl) === undefined) {
      throw new Error(`reason ${name}: recovery.ttl ${r.recovery.ttl} is not a duration`);
    }
  }
  const x = cat.xidPolicy;
  for (const a of x.recoveryActionsFatal)
    if (!(String(a) in x.recoveryActions)) throw new Error(`xidPolicy.recoveryActionsFatal: ${a} is not in recoveryActions`);
  for (const [family, text] of Object.entries(cat.policies ?? {})) policyText(cat, text, family);
  for (const [name, u] of Object.entries(cat.unknownReasons)) {
    if (!/^[A-Z][A-Za-z0-9]*$/.test(name)) throw new Error(`unknown reason ${name}: name must be PascalCase`);
    if (!(u.condition in cat.conditions)) throw new Error(`unknown reason ${name}: unknown condition ${u.condition}`);
    if (name in cat.reasons) throw new Error(`unknown reason ${name}: also defined under reasons`);
  }
  return cat;
}

/** The public API surface: what a snapshot records and what must not change silently. */
export function apiSurface(cat: CatalogYaml): Record<string, { severity: string; condition: string }> {
  const out: Record<string, { severity: string; condition: string }> = {};
  for (const name of Object.keys(cat.reasons).sort()) {
    const r = cat.reasons[name];
    out[name] = { severity: r.severity, condition: r.condition };
  }
  // A condition's reason while it is Unknown is API too; recorded with the pseudo-severity Unknown.
  for (const name of Object.keys(cat.unknownReasons).sort())
    out[name] = { severity: 'Unknown', condition: cat.unknownReasons[name].condition };
  return out;
}

/** Lists every break of the snapshot: a reason removed, or its severity or condition changed. */
export function apiBreaks(snapshot: ReturnType<typeof apiSurface>, current: ReturnType<typeof apiSurface>): string[] {
  const breaks: string[] = [];
  for (const [name, was] of Object.entries(snapshot)) {
    const now = current[name];
    if (!now) breaks.push(`${name} was removed or renamed`);
    else {
      if (now.severity !== was.severity) breaks.push(`${name} severity changed ${was.severity} -> ${now.severity}`);
      if (now.condition !== was.condition) breaks.push(`${name} condition changed ${was.condition} -> ${now.condition}`);
    }
  }
  return breaks;
}

/** A policy sentence with its {xidPolicy.NAME} placeholders filled from the catalog's data. */
function policyText(cat: CatalogYaml, text: string, family: string): string {
  const x = cat.xidPolicy;
  const values: Record<string, string> = {
    fatal: x.fatal.join(', '),
    severityInLine: `${x.severityInLine.first}-${x.severityInLine.last}`,
    recoveryActionXid: String(x.recoveryActionXid),
    recoveryActionsFatal: x.recoveryActionsFatal.map((a) => x.recoveryActions[String(a)]).join(', '),
  };
  return text.replace(/\{xidPolicy\.([A-Za-z]+)\}/g, (_, k: string) => {
    const v = values[k];
    if (v === undefined) throw new Error(`policy ${family}: unknown placeholder {xidPolicy.${k}}`);
    return v;
  });
}

function recoveryTs(r: CatalogYaml['reasons'][string]['recovery']): string {
  if (r === 'untilReboot') return `{ kind: 'untilReboot' }`;
  if ('whenHealthy' in r) return `{ kind: 'whenHealthy', healthyChecks: ${r.whenHealthy} }`;
  return `{ kind: 'ttl', ttlMs: ${parseDuration(r.ttl)} }`;
}

function typeName(name: string): string {
  return name.includes('{') ? '`' + name.replace(/\{[a-z]+\}/g, (p) => (p === '{unit}' ? '${string}' : '${number}')) + '`' : `'${name}'`;
}

export function renderTs(cat: CatalogYaml): string {
  const names = Object.keys(cat.reasons);
  const rows = names.map((name) => {
    const r = cat.reasons[name];
    return `  {
    name: ${JSON.stringify(name)},
    condition: ${JSON.stringify(r.condition)},
    severity: ${JSON.stringify(r.severity)},
    recovery: ${recoveryTs(r.recovery)},
    action: ${JSON.stringify(r.action)},
    sources: ${JSON.stringify(r.sources)},
    eks: ${r.eks === true},
    template: ${r.template ? JSON.stringify(r.template) : 'null'},
    description: ${JSON.stringify(r.description)},
  },`;
  });
  const conds = Object.entries(cat.conditions).map(
    ([t, c]) => `  ${t}: { healthyReason: ${JSON.stringify(c.healthyReason)}, healthyMessage: ${JSON.stringify(c.healthyMessage)} },`,
  );
  const condTypes = Object.keys(cat.conditions);
  return `// GENERATED by scripts/gen-catalog.ts from catalog/reasons.yaml. Do not edit; run \`npm run gen\`.
import type { RecommendedAction, Recovery, Severity, SourceName } from '../api/types.ts';

/** The built-in condition types (catalog \`conditions\`); NPD files may declare more. */
export type BuiltinConditionType =
${condTypes.map((t) => `  | '${t}'`).join('\n')};

/** The built-in condition types, in catalog order. */
export const CONDITION_TYPES: readonly BuiltinConditionType[] = [${condTypes.map((t) => `'${t}'`).join(', ')}];

/** Every reason name Vigil can report; template reasons appear as template literal types. */
export type ReasonName =
${names.map((n) => `  | ${typeName(n)}`).join('\n')};

export interface ReasonDef {
  /** The name, or the template with {param} placeholders. */
  name: string;
  condition: BuiltinConditionType;
  severity: Severity;
  recovery: Recovery;
  action: RecommendedAction;
  sources: readonly SourceName[];
  eks: boolean;
  template: Record<string, 'xid' | 'sxid' | 'unit'> | null;
  description: string;
}

export const REASONS: readonly ReasonDef[] = [
${rows.join('\n')}
];

export const CONDITIONS: Record<BuiltinConditionType, { healthyReason: string; healthyMessage: string }> = {
${conds.join('\n')}
};

/** Reasons a condition carries while Unknown: the source that watches it cannot see. */
export type UnknownReasonName =
${Object.keys(cat.unknownReasons)
  .map((n) => `  | '${n}'`)
  .join('\n')};

export const UNKNOWN_REASONS: Record<UnknownReasonName, { condition: BuiltinConditionType; description: string }> = {
${Object.entries(cat.unknownReasons)
  .map(([n, u]) => `  ${n}: { condition: ${JSON.stringify(u.condition)}, description: ${JSON.stringify(u.description)} },`)
  .join('\n')}
};

/** The Xid decision's data (catalog \`xidPolicy\`): defaults of xid.fatal and gpu.thresholds.recoveryActionsFatal. */
export const XID_POLICY = {
  fatal: ${JSON.stringify(cat.xidPolicy.fatal)} as readonly number[],
  recoveryActions: { ${Object.entries(cat.xidPolicy.recoveryActions)
    .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
    .join(', ')} } as Readonly<Record<number, string>>,
  recoveryActionsFatal: ${JSON.stringify(cat.xidPolicy.recoveryActionsFatal)} as readonly number[],
  severityInLine: ${JSON.stringify(cat.xidPolicy.severityInLine).replace(/"/g, '')},
  recoveryActionXid: ${cat.xidPolicy.recoveryActionXid},
} as const;
`;
}

function recoveryMd(r: CatalogYaml['reasons'][string]['recovery']): string {
  if (r === 'untilReboot') return 'until reboot';
  if ('whenHealthy' in r) return `when healthy (${r.whenHealthy} check${r.whenHealthy > 1 ? 's' : ''})`;
  return `after ${r.ttl} quiet`;
}

export function renderMd(cat: CatalogYaml): string {
  const out = [
    '<!-- GENERATED by scripts/gen-catalog.ts from catalog/reasons.yaml. Do not edit; run `npm run gen`. -->',
    '# Vigil reason codes',
    '',
    'Reason names, severities and condition types are public API (see CONTRIBUTING.md).',
    'Fatal sets the condition to False; Warning is a Kubernetes Event; Info is a metric and log line only.',
    'Names marked EKS match the EKS node monitoring agent, so its alerts and repair policies keep working.',
    '',
  ];
  for (const [type, c] of Object.entries(cat.conditions)) {
    out.push(`## ${type}`, '', `Healthy: status True, reason \`${c.healthyReason}\`.`, '');
    out.push('| Reason | Severity | Recovery | Action | Sources | EKS | Description |', '|---|---|---|---|---|---|---|');
    for (const [name, r] of Object.entries(cat.reasons)) {
      if (r.condition !== type) continue;
      out.push(
        `| \`${name}\` | ${r.severity} | ${recoveryMd(r.recovery)} | ${r.action} | ${r.sources.join(', ')} | ${r.eks ? 'yes' : ''} | ${r.description} |`,
      );
    }
    out.push('');
  }
  if (cat.policies && Object.keys(cat.policies).length) {
    out.push('## Severity policy', '', 'Where the reason depends on policy, the rule for each family:', '');
    for (const [family, rule] of Object.entries(cat.policies)) out.push(`- **${family}.** ${policyText(cat, rule, family)}`);
    out.push('');
  }
  out.push('## While a source cannot see', '', 'The condition is `Unknown` with one of these reasons; the message names the cause.', '');
  out.push('| Reason | Condition | Description |', '|---|---|---|');
  for (const [name, u] of Object.entries(cat.unknownReasons)) out.push(`| \`${name}\` | ${u.condition} | ${u.description} |`);
  out.push('');
  return out.join('\n');
}

function main(argv: string[]): number {
  const check = argv.includes('--check');
  const update = argv.includes('--update-snapshot');
  const cat = loadCatalogYaml(readFileSync(paths.yaml, 'utf8'));
  const surface = apiSurface(cat);
  const snapText = JSON.stringify(surface, null, 2) + '\n';
  let snapshot: ReturnType<typeof apiSurface> = {};
  try {
    snapshot = JSON.parse(readFileSync(paths.snapshot, 'utf8')) as ReturnType<typeof apiSurface>;
  } catch {
    if (check) {
      console.error('catalog/api-snapshot.json is missing: run npm run gen -- --update-snapshot');
      return 1;
    }
  }
  const breaks = apiBreaks(snapshot, surface);
  if (breaks.length && !update) {
    console.error(
      `The reason catalog breaks its public API:\n  ${breaks.join('\n  ')}\n` +
        'If this is intended, run `npm run gen -- --update-snapshot` and add a CHANGELOG.md entry marked "breaking".',
    );
    return 1;
  }
  const outputs: [string, string][] = [
    [paths.ts, renderTs(cat)],
    [paths.md, renderMd(cat)],
  ];
  if (update || Object.keys(snapshot).length === 0 || snapText !== JSON.stringify(snapshot, null, 2) + '\n') {
    // Additions are not breaking, so the snapshot follows them; breaks need --update-snapshot.
    outputs.push([paths.snapshot, snapText]);
  }
  if (check) {
    const stale = outputs.filter(([p, text]) => {
      try {
        return readFileSync(p, 'utf8') !== text;
      } catch {
        return true;
      }
    });
    if (stale.length) {
      console.error(`Generated files are stale: ${stale.map(([p]) => path.relative(root, p)).join(', ')}. Run npm run gen.`);
      return 1;
    }
    return 0;
  }
  for (const [p, text] of outputs) writeFileSync(p, text);
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  // docs/errors.md is generated with the catalog, so one `npm run gen` (and its --check) covers both.
  const catalog = main(process.argv.slice(2));
  const errors = genErrors(process.argv.slice(2));
  process.exitCode = catalog || errors;
}
