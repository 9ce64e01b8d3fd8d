/**
 * The Xid policy: the one place that decides what an Xid means. The kernel-log rule (NVRM Xid
 * lines, "fallen off the bus") and the NVML event path both collect what they saw as XidEvidence
 * and call decideXid(), so the same fault gets the same reason, severity and entity whichever way
 * it arrived. Operators override the fatal list with `xid.fatal` and mute Xids with `xid.ignore`.
 */
import type { Entity, Finding } from '../../api/types.ts';
import { XID_POLICY } from '../../catalog/index.ts';
import { entityOf } from '../gpu/inventory.ts';

/** The default of `xid.fatal`, defined with the config schema (which imports nothing from monitors). */
export { DEFAULT_FATAL_XIDS } from '../../config/xid.ts';

/** nvmlDeviceGpuRecoveryAction values (NVML field 230; the hex value in an Xid 154 line): catalog `xidPolicy.recoveryActions`. */
export const RECOVERY_ACTION_NAMES: Readonly<Record<number, string>> = XID_POLICY.recoveryActions;

/** Recovery actions that mean the GPU is unusable until reset or reboot (catalog `xidPolicy.recoveryActionsFatal`). */
export const DEFAULT_RECOVERY_ACTIONS_FATAL: readonly number[] = XID_POLICY.recoveryActionsFatal;

/** The names an Xid 154 line prints in parentheses, for lines whose hex value is missing. */
const RECOVERY_ACTION_TEXT: Record<string, number> = {
  none: 0,
  'gpu reset required': 1,
  'node reboot required': 2,
  'drain p2p': 3,
  'drain and reset': 4,
  'recover imex domain': 5,
};

/** NVLink5 Xids (Blackwell): the line says Fatal or Nonfatal after the sub-component (catalog `xidPolicy.severityInLine`). */
export const NVLINK5_XIDS = XID_POLICY.severityInLine;
/** GPU_RECOVERY_ACTION_CHANGED: the line (or NVML field 230) gives the action now in force (catalog `xidPolicy.recoveryActionXid`). */
export const RECOVERY_ACTION_XID = XID_POLICY.recoveryActionXid;

/** A catalog reason (ReasonName): the severity is in the name. */
export type XidReason = `NvidiaXID${number}Error` | `NvidiaXID${number}Warning`;

/** What a path saw of one Xid. Absent sub-decode fields mean "not seen", never "benign". */
export interface XidEvidence {
  code: number;
  /** The GPU's PCI address in any form (`PCI:0000:B3:00`, `00000000:b3:00.0`); null when unknown. */
  pci: string | null;
  /** NVML index: names the GPU when its PCI address is unknown. */
  index?: number;
  /** Xid 144-150: the severity token of the line. NVML events do not carry it. */
  nvlinkSeverity?: 'Fatal' | 'Nonfatal';
  /**
   * Xid 154: the recovery action now in force (RECOVERY_ACTION_NAMES). Xid 144-150 from NVML (no
   * severity token): the action read right after the event, from which the severity follows.
   */
  recoveryAction?: number;
}

export interface XidPolicyConfig {
  fatalXids: ReadonlySet<number> | readonly number[];
  /** Default DEFAULT_RECOVERY_ACTIONS_FATAL. */
  recoveryActionsFatal?: readonly number[];
}

export interface XidDecision {
  reason: XidReason;
  fatal: boolean;
  entity: Entity;
  /** Why it is (not) fatal, for messages: "in the fatal Xid list", "NVLink5 severity Fatal"... */
  why: string;
  /** The normalised PCI address, when known. */
  pci: string | null;
  /** xid, and each sub-decode that was seen. */
  attrs: Record<string, string | number>;
}

/**
 * Normalises a GPU PCI address to the form Xid lines use: lower case, no `PCI:` prefix, no
 * function, 4-hex-digit domain. `PCI:0000:B3:00`, `00000000:b3:00.0` -> `0000:b3:00`.
 */
export function normalizePci(raw: string): string {
  let s = raw.trim().toLowerCase();
  if (s.startsWith('pci:')) s = s.slice(4);
  s = s.replace(/\.[0-7]$/, '');
  const parts = s.split(':');
  if (parts.length === 3) parts[0] = parts[0].padStart(4, '0').slice(-4);
  else if (parts.length === 2) parts.unshift('0000');
  return parts.join(':');
}

const NVLINK5_TOKEN = /^\S+\s+(Fatal|Non-?fatal)\b/i;
const RECOVERY_TO = /recovery action changed from .*? to (?:0x([0-9a-fA-F]+))?\s*(?:\(([^)]*)\))?/;

/** The sub-decodes the text of an Xid line carries (the part after the code and pid/name). */
export function xidDetailFromText(code: number, text: string): Pick<XidEvidence, 'nvlinkSeverity' | 'recoveryAction'> {
  if (code >= NVLINK5_XIDS.first && code <= NVLINK5_XIDS.last) {
    const t = NVLINK5_TOKEN.exec(text);
    return t ? { nvlinkSeverity: t[1].toLowerCase() === 'fatal' ? 'Fatal' : 'Nonfatal' } : {};
  }
  if (code === RECOVERY_ACTION_XID) {
    const a = RECOVERY_TO.exec(text);
    const value = a?.[1] !== undefined ? parseInt(a[1], 16) : RECOVERY_ACTION_TEXT[a?.[2]?.trim().toLowerCase() ?? ''];
    return value !== undefined ? { recoveryAction: value } : {};
  }
  return {};
}

/** Decides the reason, severity and entity of one Xid from what a path saw of it. */
export function decideXid(e: XidEvidence, cfg: XidPolicyConfig): XidDecision {
  const { code } = e;
  const listed = Array.isArray(cfg.fatalXids) ? cfg.fatalXids.includes(code) : (cfg.fatalXids as ReadonlySet<number>).has(code);
  const attrs: Record<string, string | number> = { xid: code };
  let fatal = listed;
  let why = listed ? 'in the fatal Xid list' : 'not in the fatal Xid list';
  // A sub-decode the path saw wins over the list; without one, the list decides.
  if (code >= NVLINK5_XIDS.first && code <= NVLINK5_XIDS.last && e.nvlinkSeverity) {
    fatal = e.nvlinkSeverity === 'Fatal';
    why = `NVLink5 severity ${e.nvlinkSeverity}`;
    attrs.nvlinkSeverity = e.nvlinkSeverity;
  } else if (code >= NVLINK5_XIDS.first && code <= NVLINK5_XIDS.last && e.recoveryAction !== undefined) {
    // NVML events carry no severity token; a fatal NVLink5 error sets a reset/reboot recovery
    // action (field 230, also announced as Xid 154), a non-fatal one leaves it as it was.
    const a = e.recoveryAction;
    fatal = (cfg.recoveryActionsFatal ?? DEFAULT_RECOVERY_ACTIONS_FATAL).includes(a);
    const severity = fatal ? 'Fatal' : 'Nonfatal';
    why = `NVLink5 severity ${severity} (from recovery action ${RECOVERY_ACTION_NAMES[a] ?? `action ${a}`} (${a}))`;
    attrs.nvlinkSeverity = severity;
  } else if (code === RECOVERY_ACTION_XID && e.recoveryAction !== undefined) {
    const a = e.recoveryAction;
    fatal = (cfg.recoveryActionsFatal ?? DEFAULT_RECOVERY_ACTIONS_FATAL).includes(a);
    why = `recovery action ${RECOVERY_ACTION_NAMES[a] ?? `action ${a}`} (${a})`;
    attrs.recoveryAction = a;
  }
  const pci = e.pci ? normalizePci(e.pci) : null;
  if (pci) attrs.pci = pci;
  const entity = pci || e.index !== undefined ? entityOf({ pci, index: e.index ?? -1 }) : '';
  const reason: XidReason = fatal ? `NvidiaXID${code}Error` : `NvidiaXID${code}Warning`;
  return { reason, fatal, entity, why, pci, attrs };
}

/** Whether a finding is an Xid the operator chose not to hear about. */
export function isIgnoredXid(f: Finding, ignore: ReadonlySet<number>): boolean {
  return ignore.size > 0 && typeof f.attrs?.xid === 'number' && ignore.has(f.attrs.xid) && /^NvidiaXID\d+(Warning|Error)$/.test(f.reason);
}
