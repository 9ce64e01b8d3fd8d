/**
 * Reason names and condition types come from the catalog. The `@ts-expect-error` lines are checked
 * by `tsc` (npm test type-checks the tests): each must stay a compile error, so a misspelt
 * built-in reason can never compile again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { loadCatalogYaml, paths } from '../../scripts/gen-catalog.ts';
import { CONDITION_TYPES as API_CONDITION_TYPES, type BuiltinFinding, type Finding } from '../../src/api/index.ts';
import { CONDITIONS, CONDITION_TYPES, isReasonName, lookupReason, ruleReason, type ReasonName } from '../../src/catalog/index.ts';
import { configSchema } from '../../src/settings/index.ts';
import { finding, type RuleHit } from '../../src/monitors/index.ts';

const base = { message: 'm', source: 'kmsg', entity: '', at: 0 } as const;

test('a misspelt built-in reason does not compile, and rule reasons are a separate declared type', () => {
  // @ts-expect-error 'SoftLockp' is not a catalog reason
  const typo: Finding = { ...base, reason: 'SoftLockp' };
  // @ts-expect-error template reasons are checked too (XID, not Xid)
  const typoTemplate: ReasonName = 'NvidiaXid48Error';
  // @ts-expect-error the host checks' constructor takes catalog reasons only
  const typoHost = finding('DiskUsageHihg', 'procfs', '', 'x', 0);
  // @ts-expect-error a kernel-log rule hit takes catalog reasons only
  const typoRule: RuleHit = { reason: 'KernelBugs', entity: '', summary: '' };
  // @ts-expect-error a reason named by configuration is not a built-in one
  const notBuiltin: BuiltinFinding = { ...base, reason: ruleReason('Mlx5Fatal') };
  for (const name of [typo.reason, typoTemplate, typoHost.reason, typoRule.reason]) assert.equal(isReasonName(name), false, name);

  // Both kinds flow into the engine's Finding.
  const builtin: Finding = { ...base, reason: 'NvidiaXID48Error' };
  const configured: Finding = { ...notBuiltin, reason: ruleReason('Mlx5Fatal') };
  assert.equal(lookupReason(builtin.reason)?.severity, 'Fatal');
  assert.equal(lookupReason(configured.reason), undefined);
  assert.equal(isReasonName('NvidiaXID48Error'), true);
});

test('condition types are one generated list: catalog conditions, the API, the healthy reasons and config names', () => {
  const cat = loadCatalogYaml(readFileSync(paths.yaml, 'utf8'));
  assert.deepEqual([...CONDITION_TYPES], Object.keys(cat.conditions));
  assert.equal(API_CONDITION_TYPES, CONDITION_TYPES);
  assert.deepEqual(Object.keys(CONDITIONS), [...CONDITION_TYPES]);
  assert.deepEqual(Object.keys(configSchema.parse({}).conditions.names), [...CONDITION_TYPES]);
  for (const r of Object.values(cat.reasons)) assert.ok(CONDITION_TYPES.includes(r.condition as never), r.condition);
});
