/**
 * Built-in kernel-log rules: pure functions from one kernel message to at most one hit.
 *
 * Cost model: nearly every kernel line is benign, so each rule names cheap `keywords`; the
 * classifier first runs one combined keyword test over the line and only runs a rule's regex
 * when one of its keywords is present. Rules are tried in order and the first hit wins, which is
 * how a libnccl segfault becomes NvidiaNCCLError and not also AppCrash, and how "BUG: soft
 * lockup" becomes SoftLockup and not KernelBug.
 */
import type { ReasonName } from '../../catalog/index.ts';
import { DEFAULT_FATAL_XIDS, decideXid, normalizePci, xidDetailFromText } from '../xid/policy.ts';

export { DEFAULT_FATAL_XIDS, normalizePci } from '../xid/policy.ts';

/** Default: PCIe corrected errors become a finding at 20 on one device within 1 h. */
export const DEFAULT_PCIE_CORRECTED_THRESHOLD = { count: 20, windowMs: 3_600_000 } as const;

/** Block devices whose I/O errors are noise on most nodes: floppy, CD-ROM (cloud-init ISO), loop. */
export const DEFAULT_IGNORED_BLOCK_DEVICES = /^(?:fd|sr|loop)\d+$/;

export interface RuleEnv {
  fatalXids: ReadonlySet<number>;
  /** Xid 154 recovery actions that are fatal (default: the Xid policy's). */
  recoveryActionsFatal?: readonly number[];
  pcieCorrectedThreshold: { count: number; windowMs: number };
  ignoredBlockDevices: RegExp;
  /** The GPU (normalised PCI address) below a PCIe device, when the GPU monitor can tell. */
  gpuAbove?: (bdf: string) => string | undefined;
}

export interface RuleHit {
  /** A catalog reason: a misspelt one does not compile. */
  reason: ReasonName;
  entity: string;
  /** A short human description; the classifier appends the log text. */
  summary: string;
  attrs?: Record<string, string | number | boolean>;
  threshold?: { count: number; windowMs: number };
}

export interface KernelRule {
  readonly name: string;
  /** Substrings of which at least one must be present for `match` to be tried. */
  readonly keywords: readonly string[];
  match(msg: string, env: RuleEnv): RuleHit | null;
}

const PCI = '(?:PCI:)?[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\\.[0-7])?';

// ------------------------------------------------------------------ NVIDIA GPU

const XID = new RegExp(`NVRM: Xid \\((${PCI})\\): (\\d{1,4}),? ?(.*)`);
const PID_NAME = /^pid=('?<unknown>'?|[^,]*), name=([^,]*),? ?(.*)$/;

const xid: KernelRule = {
  name: 'nvidia-xid',
  keywords: ['NVRM: Xid'],
  match(msg, env) {
    const m = XID.exec(msg);
    if (!m) return null;
    const code = Number(m[2]);
    let rest = m[3] ?? '';
    const attrs: Record<string, string | number | boolean> = {};
    const pn = PID_NAME.exec(rest);
    if (pn) {
      const pid = pn[1].replace(/'/g, '');
      if (/^\d+$/.test(pid)) attrs.pid = Number(pid);
      if (pn[2] && pn[2] !== '<unknown>') attrs.process = pn[2];
      rest = pn[3] ?? '';
    }
    const d = decideXid({ code, pci: m[1], ...xidDetailFromText(code, rest) }, env);
    return { reason: d.reason, entity: d.entity, summary: `NVIDIA Xid ${code} on GPU ${d.pci}`, attrs: { ...d.attrs, ...attrs } };
  },
};

const FALLEN_NEW = new RegExp(`NVRM: GPU (${PCI}): GPU has fallen off the bus`);
const FALLEN_OLD = new RegExp(`NVRM: GPU at (${PCI}) has fallen off the bus`);

/** The single-line "fallen off the bus" forms (the multi-line one is joined in classify.ts). */
const fallenOff: KernelRule = {
  name: 'nvidia-fallen-off-bus',
  keywords: ['fallen off the bus'],
  match(msg, env) {
    const m = FALLEN_NEW.exec(msg) ?? FALLEN_OLD.exec(msg);
    if (!m) return null;
    return fallenOffHit(normalizePci(m[1]), env);
  },
};

/** Xid 79 (fallen off the bus) for a GPU whose fallen-off text came without (or before) its Xid 79 line. */
export function fallenOffHit(pci: string | undefined, env?: Pick<RuleEnv, 'fatalXids'>): RuleHit {
  const d = decideXid({ code: 79, pci: pci ?? null }, env ?? { fatalXids: DEFAULT_FATAL_XIDS });
  return {
    reason: d.reason,
    entity: d.entity,
    summary: `NVIDIA GPU ${d.pci ?? '(unknown PCI address)'} has fallen off the bus`,
    attrs: d.attrs,
  };
}

const INIT_FAILED = new RegExp(`NVRM: GPU (${PCI}): (?:RmInitAdapter|rm_init_adapter) failed`);
const initFailed: KernelRule = {
  name: 'nvidia-init-failed',
  keywords: ['RmInitAdapter failed', 'rm_init_adapter failed'],
  match(msg) {
    if (!msg.includes('NVRM')) return null;
    const m = INIT_FAILED.exec(msg);
    const pci = m ? normalizePci(m[1]) : undefined;
    return {
      reason: 'NvidiaGPUInitFailed',
      entity: pci ? `gpu:${pci}` : '',
      summary: `NVIDIA driver could not initialise GPU ${pci ?? '(unknown PCI address)'}`,
      ...(pci ? { attrs: { pci } } : {}),
    };
  },
};

const GSP_GPU = /NVRM: GPU(\d+) /;
const gspTimeout: KernelRule = {
  name: 'nvidia-gsp-timeout',
  keywords: ['_kgspLogRpcTimeout', 'Heartbeat timed out', 'Timeout waiting for RPC from GSP'],
  match(msg) {
    if (!msg.includes('NVRM')) return null;
    const g = GSP_GPU.exec(msg);
    // "GPU6" is the driver's instance number, not a PCI address, so it goes to attrs only.
    return {
      reason: 'NvidiaGSPTimeout',
      entity: '',
      summary: `NVIDIA GSP firmware timeout${g ? ` on GPU${g[1]}` : ''}`,
      ...(g ? { attrs: { gpuIndex: Number(g[1]) } } : {}),
    };
  },
};

const SXID = /nvidia-nvswitch(\d+): SXid \(PCI:([0-9a-fA-F:.]+)\): (\d{1,6}),? ?(Fatal|Non-fatal)?/;
const sxid: KernelRule = {
  name: 'nvidia-sxid',
  keywords: ['SXid'],
  match(msg) {
    const m = SXID.exec(msg);
    if (!m) return null;
    const pci = normalizePci(m[2]);
    const code = Number(m[3]);
    const fatal = m[4] === 'Fatal';
    return {
      reason: fatal ? `NvidiaSXid${code}Error` : `NvidiaSXid${code}Warning`,
      entity: `nvswitch:${pci}`,
      summary: `NVSwitch ${m[1]} SXid ${code}${m[4] ? ` (${m[4]})` : ''} at ${pci}`,
      attrs: { pci, sxid: code, nvswitch: Number(m[1]) },
    };
  },
};

const PROC_PID = /(\S+)\[(\d+)\]/;
const ncclCrash: KernelRule = {
  name: 'nvidia-nccl-crash',
  keywords: ['libnccl'],
  match(msg) {
    if (!/(?:segfault at|traps:).* in libnccl\.so/.test(msg)) return null;
    const p = PROC_PID.exec(msg);
    return {
      reason: 'NvidiaNCCLError',
      entity: '',
      summary: `process ${p ? `${p[1]} (pid ${p[2]}) ` : ''}crashed in libnccl`,
      ...(p ? { attrs: { process: p[1], pid: Number(p[2]) } } : {}),
    };
  },
};

// ------------------------------------------------------------------ kernel

const SOFT_LOCKUP = /soft lockup - CPU#(\d+) stuck for (\d+)s!(?: \[(.+):(\d+)\])?/;
const softLockup: KernelRule = {
  name: 'soft-lockup',
  keywords: ['soft lockup - CPU#'],
  match(msg) {
    const m = SOFT_LOCKUP.exec(msg);
    if (!m) return null;
    const attrs: Record<string, string | number> = { cpu: Number(m[1]), seconds: Number(m[2]) };
    if (m[3]) {
      attrs.process = m[3];
      attrs.pid = Number(m[4]);
    }
    // Per CPU, so lockups on different CPUs are separate problems (like gpu:, pci:, blockdev:).
    return { reason: 'SoftLockup', entity: `cpu:${m[1]}`, summary: `CPU ${m[1]} stuck in the kernel for ${m[2]}s`, attrs };
  },
};

const HUNG_TASK = /\btask (.+):(\d+) blocked for more than (\d+)(?: seconds|s)\b/;
const appBlocked: KernelRule = {
  name: 'hung-task',
  keywords: [' blocked for more than '],
  match(msg) {
    const m = HUNG_TASK.exec(msg);
    if (!m) return null;
    return {
      reason: 'AppBlocked',
      entity: '',
      summary: `task ${m[1]} (pid ${m[2]}) blocked for more than ${m[3]}s`,
      attrs: { process: m[1], pid: Number(m[2]), seconds: Number(m[3]) },
    };
  },
};

const SEGFAULT = /(\S+)\[(\d+)\]: segfault at /;
const TRAP = /traps: (\S+)\[(\d+)\] /;
const appCrash: KernelRule = {
  name: 'app-crash',
  keywords: ['segfault at ', 'traps: '],
  match(msg) {
    const m = SEGFAULT.exec(msg) ?? TRAP.exec(msg);
    if (!m) return null;
    return {
      reason: 'AppCrash',
      entity: '',
      summary: `process ${m[1]} (pid ${m[2]}) crashed`,
      attrs: { process: m[1], pid: Number(m[2]) },
    };
  },
};

// Anchored at the start of the message (after optional dmesg-style "[...]" prefixes), so a
// "traps: x[1] general protection fault" (user space) or a WARNING splat does not count.
const KERNEL_BUG_HEAD =
  /^(?:\[[^\]]{0,40}\]\s*){0,3}(?:BUG: |kernel BUG at |Oops\b|Internal error: Oops|general protection fault\b|divide error: \d+ \[#|invalid opcode: \d+ \[#)/;
const KERNEL_BUG_ANY = /unable to handle kernel (?:NULL pointer dereference|paging request)/;
const kernelBug: KernelRule = {
  name: 'kernel-bug',
  keywords: ['BUG', 'Oops', 'general protection fault', 'unable to handle kernel', 'divide error', 'invalid opcode'],
  match(msg) {
    if (!KERNEL_BUG_HEAD.test(msg) && !KERNEL_BUG_ANY.test(msg)) return null;
    return { reason: 'KernelBug', entity: '', summary: 'kernel BUG/Oops' };
  },
};

const OOM = /(Memory cgroup out of memory: |Out of memory(?: \([^)]*\))?: )?Killed process (\d+) \(([^)]*)\)( total-vm:)?/;
const oomKill: KernelRule = {
  name: 'oom-kill',
  keywords: ['Killed process'],
  match(msg) {
    const m = OOM.exec(msg);
    if (!m || (!m[1] && !m[4])) return null;
    const cgroup = m[1]?.startsWith('Memory cgroup') ?? false;
    return {
      reason: 'OOMKilling',
      entity: '',
      summary: `${cgroup ? 'memory cgroup ' : ''}OOM killer killed ${m[3]} (pid ${m[2]})`,
      attrs: { pid: Number(m[2]), process: m[3], cgroup },
    };
  },
};

const CPER = /\[Hardware Error\]: event severity: (fatal|corrected|recoverable)\b/;
const cper: KernelRule = {
  name: 'cper-hardware-error',
  keywords: ['[Hardware Error]: event severity'],
  match(msg) {
    const m = CPER.exec(msg);
    if (!m) return null;
    const fatal = m[1] === 'fatal';
    return {
      reason: fatal ? 'HardwareErrorFatal' : 'HardwareErrorCorrected',
      entity: '',
      summary: `UEFI CPER ${m[1]} hardware error`,
      attrs: { severity: m[1] },
    };
  },
};

const AER =
  /(?:(\S+) )?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: severity=(Corrected|Correctable|Uncorrect(?:ed|able) \((?:Non-Fatal|Fatal)\))(?:, type=([A-Za-z ]+))?/;
const aer: KernelRule = {
  name: 'pcie-aer',
  keywords: ['PCIe Bus Error'],
  match(msg, env) {
    const m = AER.exec(msg);
    if (!m) return null;
    const bdf = m[2].toLowerCase();
    const sev = m[3];
    const attrs: Record<string, string> = { device: bdf, severity: sev };
    if (m[1]) attrs.driver = m[1];
    if (m[4]) attrs.type = m[4].trim();
    const gpu = env.gpuAbove?.(bdf);
    if (gpu) attrs.gpu = gpu;
    const where = `${bdf}${m[1] ? ` (${m[1]})` : ''}${gpu ? ` above GPU ${gpu}` : ''}`;
    if (sev.startsWith('Correct')) {
      return {
        reason: 'PCIeCorrectedErrors',
        entity: `pci:${bdf}`,
        summary: `PCIe corrected error on ${where}`,
        attrs,
        threshold: { ...env.pcieCorrectedThreshold },
      };
    }
    const fatal = sev.endsWith('(Fatal)');
    return {
      reason: fatal ? 'PCIeUncorrectableError' : 'PCIeUncorrectableNonFatal',
      entity: `pci:${bdf}`,
      summary: `PCIe uncorrectable ${fatal ? 'fatal' : 'non-fatal'} error on ${where}`,
      attrs,
    };
  },
};

const conntrack: KernelRule = {
  name: 'conntrack-full',
  keywords: ['table full, dropping packet'],
  match(msg) {
    if (!/(?:nf|ip)_conntrack: table full, dropping packet/.test(msg)) return null;
    return { reason: 'ConntrackExceededKernel', entity: '', summary: 'conntrack table full, kernel dropping packets' };
  },
};

// ------------------------------------------------------------------ storage

const BLK_ERR = /(I\/O|critical medium|critical target|timeout|protection) error, dev ([^,\s]+), sector (\d+)/;
const BUFFER_IO = /Buffer I\/O error on dev(?:ice)? ([^,\s]+), logical block (\d+)/;
const blockIo: KernelRule = {
  name: 'block-io-error',
  keywords: ['error, dev ', 'Buffer I/O error'],
  match(msg, env) {
    const m = BLK_ERR.exec(msg);
    const b = m ? null : BUFFER_IO.exec(msg);
    const dev = m ? m[2] : b ? b[1] : undefined;
    if (!dev || env.ignoredBlockDevices.test(dev)) return null;
    const attrs: Record<string, string | number> = { device: dev };
    if (m) {
      attrs.sector = Number(m[3]);
      attrs.kind = m[1]!;
    } else attrs.block = Number(b![2]);
    return { reason: 'BlockDeviceIOError', entity: `blockdev:${dev}`, summary: `${m ? m[1] : 'buffer I/O'} error on ${dev}`, attrs };
  },
};

const EXT4_ERR = /EXT4-fs error(?: \(device ([^)]+)\))?/;
const ext4: KernelRule = {
  name: 'ext4-error',
  keywords: ['EXT4-fs error'],
  match(msg) {
    const m = EXT4_ERR.exec(msg);
    if (!m) return null;
    const dev = m[1];
    return {
      reason: 'Ext4Error',
      entity: dev ? `blockdev:${dev}` : '',
      summary: `ext4 error${dev ? ` on ${dev}` : ''}`,
      ...(dev ? { attrs: { device: dev } } : {}),
    };
  },
};

const XFS_DOWN = /XFS \(([^)]+)\): .*(?:Shutting down filesystem|xfs_do_force_shutdown|[Ff]ilesystem has been shut down)/;
const xfs: KernelRule = {
  name: 'xfs-shutdown',
  keywords: ['Shutting down filesystem', 'xfs_do_force_shutdown', 'has been shut down'],
  match(msg) {
    const m = XFS_DOWN.exec(msg);
    if (!m && !msg.includes('xfs_do_force_shutdown')) return null;
    const dev = m?.[1];
    return {
      reason: 'XFSShutdown',
      entity: dev ? `blockdev:${dev}` : '',
      summary: `XFS shut down${dev ? ` on ${dev}` : ''}`,
      ...(dev ? { attrs: { device: dev } } : {}),
    };
  },
};

const RO_REMOUNT = /(?:\S+ \(([^)]+)\): )?Remounting filesystem read-only/;
const BTRFS_RO = /BTRFS.*\(device ([^)]+)\).*forced readonly/;
const readOnly: KernelRule = {
  name: 'filesystem-read-only',
  keywords: ['Remounting filesystem read-only', 'forced readonly'],
  match(msg) {
    const m = RO_REMOUNT.exec(msg) ?? BTRFS_RO.exec(msg);
    if (!m) return null;
    const dev = m[1];
    return {
      reason: 'FilesystemReadOnly',
      entity: dev ? `blockdev:${dev}` : '',
      summary: `filesystem${dev ? ` on ${dev}` : ''} remounted read-only`,
      ...(dev ? { attrs: { device: dev } } : {}),
    };
  },
};

/** All built-in rules in priority order (first hit wins). */
export const BUILTIN_RULES: readonly KernelRule[] = [
  xid,
  fallenOff,
  initFailed,
  gspTimeout,
  sxid,
  ncclCrash,
  softLockup,
  appBlocked,
  appCrash,
  kernelBug,
  oomKill,
  cper,
  aer,
  conntrack,
  blockIo,
  ext4,
  xfs,
  readOnly,
];
