/** Container-runtime checks: probe results and unit states in, findings and healthy entities out. No I/O. */
import type { ReasonName } from '../../catalog/index.ts';
import { finding } from '../host-finding.ts';
import type { CheckReport } from '../host-check.ts';
import type { RuntimeConfig } from './config.ts';

/** Outcome of a local liveness probe. `absent`: nothing there to probe (not installed, not listening). */
export type ProbeResult = { kind: 'ok' } | { kind: 'absent'; detail: string } | { kind: 'bad'; detail: string };

export function checkKubelet(p: ProbeResult, required: boolean, at: number): CheckReport {
  const entity = 'unit:kubelet.service';
  if (p.kind === 'ok') return { findings: [], healthy: [{ reasons: ['KubeletUnhealthy'], entity, source: 'exec' }] };
  if (p.kind === 'absent' && !required) return { findings: [], healthy: [], status: 'skipped' };
  return { findings: [finding('KubeletUnhealthy', 'exec', entity, `kubelet health endpoint: ${p.detail}`, at)], healthy: [] };
}

export function checkContainerd(p: ProbeResult, required: boolean, at: number): CheckReport {
  const entity = 'unit:containerd.service';
  if (p.kind === 'ok') return { findings: [], healthy: [{ reasons: ['ContainerRuntimeUnresponsive'], entity, source: 'exec' }] };
  if (p.kind === 'absent' && !required) return { findings: [], healthy: [], status: 'skipped' };
  return { findings: [finding('ContainerRuntimeUnresponsive', 'exec', entity, `containerd CRI socket: ${p.detail}`, at)], healthy: [] };
}

export interface UnitState {
  id: string;
  loadState: string;
  activeState: string;
  subState: string;
  nRestarts?: number;
}

/** `systemctl show -p Id,LoadState,ActiveState,SubState,NRestarts u1 u2 ...`: one blank-line separated block per unit. */
export function parseSystemctlShow(text: string): UnitState[] {
  const units: UnitState[] = [];
  for (const block of text.split(/\n\s*\n/)) {
    const kv = new Map<string, string>();
    for (const line of block.split('\n')) {
      const i = line.indexOf('=');
      if (i > 0) kv.set(line.slice(0, i).trim(), line.slice(i + 1).trim());
    }
    const id = kv.get('Id');
    if (!id) continue;
    const u: UnitState = {
      id,
      loadState: kv.get('LoadState') ?? '',
      activeState: kv.get('ActiveState') ?? '',
      subState: kv.get('SubState') ?? '',
    };
    const n = Number(kv.get('NRestarts'));
    if (kv.has('NRestarts') && Number.isInteger(n)) u.nRestarts = n;
    units.push(u);
  }
  return units;
}

/** 'nvidia-persistenced.service' → 'Nvidia-PersistencedRepeatedRestart' (the EKS agent's names). */
export function restartReason(unitId: string): `${string}RepeatedRestart` {
  const base = unitId.replace(/\.service$/, '').replace(/[^A-Za-z0-9-]/g, '');
  return `${base
    .split('-')
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join('-')}RepeatedRestart`;
}

const FAILED_REASON: Record<string, ReasonName> = { 'kubelet.service': 'KubeletFailed', 'containerd.service': 'ContainerRuntimeFailed' };

export function checkUnits(units: UnitState[], prevRestarts: Map<string, number>, cfg: RuntimeConfig, at: number): CheckReport {
  const r: CheckReport = { findings: [], healthy: [] };
  for (const u of units) {
    if (u.loadState !== 'loaded') continue; // not installed on this node
    const entity = `unit:${u.id}`;
    const failed = FAILED_REASON[u.id];
    if (failed) {
      if (u.activeState === 'failed')
        r.findings.push(finding(failed, 'exec', entity, `${u.id} is in the failed state (${u.subState})`, at, { subState: u.subState }));
      else r.healthy.push({ reasons: [failed], entity, source: 'exec' });
    }
    if (u.nRestarts === undefined) continue;
    const before = prevRestarts.get(u.id);
    prevRestarts.set(u.id, u.nRestarts);
    if (before === undefined) continue; // first sample: "increased" is unknown
    const reason = restartReason(u.id);
    if (u.nRestarts > cfg.units.restartThreshold && u.nRestarts > before) {
      r.findings.push(
        finding(
          reason,
          'exec',
          entity,
          `${u.id} restarted ${u.nRestarts - before} time(s) since the last poll (${u.nRestarts} in total)`,
          at,
          {
            nRestarts: u.nRestarts,
          },
        ),
      );
    } else r.healthy.push({ reasons: [reason], entity, source: 'exec' });
  }
  if (units.every((u) => u.loadState !== 'loaded')) r.status = 'skipped';
  return r;
}
