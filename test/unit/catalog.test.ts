import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { apiBreaks, apiSurface, loadCatalogYaml, paths, renderMd, renderTs } from '../../scripts/gen-catalog.ts';
import { lookupReason, fillTemplate, REASONS } from '../../src/catalog/index.ts';

const yamlText = readFileSync(paths.yaml, 'utf8');
const cat = loadCatalogYaml(yamlText);

test('generated TypeScript and docs are up to date with catalog/reasons.yaml', () => {
  assert.equal(readFileSync(paths.ts, 'utf8'), renderTs(cat), 'run npm run gen');
  assert.equal(readFileSync(paths.md, 'utf8'), renderMd(cat), 'run npm run gen');
});

test('the committed API snapshot matches the catalog (names, severities, condition types)', () => {
  const snapshot = JSON.parse(readFileSync(paths.snapshot, 'utf8')) as ReturnType<typeof apiSurface>;
  assert.deepEqual(apiBreaks(snapshot, apiSurface(cat)), [], 'breaking change: update the snapshot and CHANGELOG');
  assert.deepEqual(snapshot, apiSurface(cat));
});

test('the snapshot guard reports a removed reason, a severity change and a condition change', () => {
  const snapshot = apiSurface(cat);
  const changed = loadCatalogYaml(
    yamlText
      .replace(
        /\n {2}SoftLockup:\n {4}condition: KernelReady\n {4}severity: Warning/,
        '\n  SoftLockup:\n    condition: KernelReady\n    severity: Fatal',
      )
      .replace(/\n {2}OOMKilling:\n {4}condition: KernelReady/, '\n  OOMKilling:\n    condition: StorageReady')
      .replace(/\n {2}AppCrash:\n/, '\n  ApplicationCrash:\n'),
  );
  const breaks = apiBreaks(snapshot, apiSurface(changed));
  assert.deepEqual(breaks.sort(), [
    'AppCrash was removed or renamed',
    'OOMKilling condition changed KernelReady -> StorageReady',
    'SoftLockup severity changed Warning -> Fatal',
  ]);
  assert.deepEqual(
    apiBreaks(apiSurface(cat), { ...apiSurface(cat), NewReason: { severity: 'Info', condition: 'KernelReady' } }),
    [],
    'an addition is not a break',
  );
});

test('invalid catalog entries are rejected with the field named', () => {
  assert.throws(() => loadCatalogYaml(yamlText.replace('severity: Warning', 'severity: Critical')), /reasons\.\w+\.severity/);
  assert.throws(() => loadCatalogYaml(yamlText.replace('condition: KernelReady', 'condition: NopeReady')), /unknown condition NopeReady/);
});

test('template reasons resolve to their definition; unknown names do not', () => {
  assert.equal(lookupReason('NvidiaXID48Error')?.severity, 'Fatal');
  assert.equal(lookupReason('NvidiaXID13Warning')?.severity, 'Warning');
  assert.equal(lookupReason('NvidiaSXid24007Error')?.condition, 'AcceleratedHardwareReady');
  assert.equal(lookupReason('Nvidia-PersistencedRepeatedRestart')?.condition, 'ContainerRuntimeReady');
  assert.equal(lookupReason('NvidiaXIDabcError'), undefined);
  assert.equal(lookupReason('SoftLockupX'), undefined);
  assert.equal(fillTemplate('NvidiaXID{code}Error', { code: 79 }), 'NvidiaXID79Error');
});

test('EKS-compatible names keep the EKS severities where the issue does not say otherwise', () => {
  const eks = REASONS.filter((r) => r.eks).map((r) => r.name);
  for (const name of [
    'SoftLockup',
    'AppCrash',
    'NvidiaXID{code}Error',
    'NvidiaDeviceCountMismatch',
    'InterfaceNotUp',
    'BlockDeviceIOError',
  ]) {
    assert.ok(eks.includes(name), `${name} is marked as shared with EKS`);
  }
});
