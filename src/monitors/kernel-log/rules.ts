/**
 * Built-in kernel-log rules: pure functions from one kernel message to at most one hit.
 *
 * Cost model: nearly every kernel line is benign, so each rule names cheap `keywords` (and, where
 * a shorter word every matching line holds will do, `prefilter` words); the classifier runs one
 * combined search for all of them over the line and only tries the rules whose words it found.
 * Rules are tried in order and the first hit wins, which is how a libnccl segfault becomes
 * NvidiaNCCLError and not also AppCrash, and how "BUG: soft lockup" becomes SoftLockup and not
 * KernelBug.
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
  /**
   * What the classifier's one combined test looks for instead of `keywords`, where a shorter word
   * every matching line holds is enough (every NVRM rule's lines hold "NVRM"): fewer words, faster test.
   */
  readonly prefilter?: readonly string[];
  match(msg: string, env: RuleEnv): RuleHit | null;
}

const PCI = '(?:PCI:)?[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\\.[0-7])?';

// ------------------------------------------------------------------ NVIDIA GPU

// The parenthesis holds the PCI address, on a MIG GPU followed by " GPU-I:05" and " GPU-CI:00"; a
// pasted log may have it redacted ("PCI:xxxx:xx:xx"), which still names an Xid, on an unknown GPU.
const XID = /NVRM: Xid \(([^)]{0,64})\): (\d{1,4}),? ?(.*)/;
const XID_PCI = new RegExp(`^(${PCI})(?:$|\\s)`);
const XID_MIG = /GPU-I:(\d+)(?: GPU-CI:(\d+))?/;
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
    const pci = XID_PCI.exec(m[1]);
    const mig = XID_MIG.exec(m[1]);
    if (mig) {
      attrs.gpuInstance = Number(mig[1]);
      if (mig[2] !== undefined) attrs.computeInstance = Number(mig[2]);
    }
    const d = decideXid({ code, pci: pci ? pci[1] : null, ...xidDetailFromText(code, rest) }, env);
    return { reason: d.reason, entity: d.entity, summary: `NVIDIA Xid ${code} on GPU ${d.pci}`, attrs: { ...d.attrs, ...attrs } };
  },
};

const FALLEN_NEW = new RegExp(`NVRM: GPU (${PCI}): GPU has fallen off the bus`);
const FALLEN_OLD = new RegExp(`NVRM: GPU at (${PCI}) has fallen off the bus`);

/** The single-line "fallen off the bus" forms (the multi-line one is joined in classify.ts). */
const fallenOff: KernelRule = {
  name: 'nvidia-fallen-off-bus',
  keywords: ['fallen off the bus'],
  prefilter: ['NVRM'],
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
// "RmInitAdapter failed!" (any branch) and "rm_init_adapter failed for device bearing minor number 0"
// (R470 and older). The probe summary "The NVIDIA probe routine failed for 1 device(s)" follows a
// fallen-off or unsupported-GPU message that already said what failed, so it raises nothing.
const INIT_ANY = /(?:RmInitAdapter|rm_init_adapter) failed/;
const initFailed: KernelRule = {
  name: 'nvidia-init-failed',
  keywords: ['RmInitAdapter failed', 'rm_init_adapter failed'],
  prefilter: ['NVRM'],
  match(msg) {
    if (!msg.includes('NVRM') || !INIT_ANY.test(msg)) return null;
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
// R515-R535 "Timeout waiting for RPC from GSP[N]!", R535+ "_kgspLogXid119" / "_kgspLogRpcTimeout"
// banners, "_issueRpcAndWait: rpcRecvPoll timedout", and the heartbeat checks ("Heartbeat timed out",
// R590+ "_kgspRpcRecvPoll: GSP RM heartbeat timed out" / "LibOS heartbeat timed out").
const GSP_TIMEOUT =
  /_kgspLogRpcTimeout|_kgspLogXid119|_kgspIsHeartbeatTimedOut|[Hh]eartbeat timed out|Timeout waiting for RPC from GSP|rpcRecvPoll timedout/;
const gspTimeout: KernelRule = {
  name: 'nvidia-gsp-timeout',
  keywords: ['_kgspLog', 'eartbeat timed out', 'Timeout waiting for RPC from GSP', 'pcRecvPoll timedout'],
  prefilter: ['NVRM'],
  match(msg) {
    if (!msg.includes('NVRM') || !GSP_TIMEOUT.test(msg)) return null;
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

// One SXid prints a header ("24007, Fatal, Link 28 ..."), a detail line ("24007, Severity 1 Engine
// instance 28 ...": 1 fatal, 0 non-fatal) and a "Data {...}" dump. The header and the detail line each
// carry the severity; the Data line carries none and raises nothing. A line with no severity at all
// ("26006, SOE HALTED") is a warning.
const SXID = /nvidia-nvswitch(\d+): SXid \(PCI:([0-9a-fA-F:.]+)\): (\d{1,6}),? ?(Fatal|Non-fatal|Severity (\d)|Data \{)?/;
const sxid: KernelRule = {
  name: 'nvidia-sxid',
  keywords: ['SXid'],
  match(msg) {
    const m = SXID.exec(msg);
    if (!m || m[4] === 'Data {') return null;
    const pci = normalizePci(m[2]);
    const code = Number(m[3]);
    const fatal = m[4] === 'Fatal' || m[5] === '1';
    const sev = m[5] !== undefined ? `severity ${m[5]}` : m[4];
    return {
      reason: fatal ? `NvidiaSXid${code}Error` : `NvidiaSXid${code}Warning`,
      entity: `nvswitch:${pci}`,
      summary: `NVSwitch ${m[1]} SXid ${code}${sev ? ` (${sev})` : ''} at ${pci}`,
      attrs: { pci, sxid: code, nvswitch: Number(m[1]) },
    };
  },
};

// Bounded runs (a comm is at most 15 characters): an unbounded \S+ at every start of a long
// non-space run takes time quadratic in the line on V8's backtracking engine.
const PROC_PID = /(\S{1,64})\[(\d{1,10})\]/;
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
  prefilter: ['BUG'],
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

// "NMI watchdog: Watchdog detected hard LOCKUP on cpu 79" (3.x/4.x), "watchdog: ..." (5.x+),
// "Kernel panic - not syncing: Hard LOCKUP", powerpc "Watchdog CPU:59 Hard LOCKUP".
const HARD_LOCKUP = /(?:[Hh]ard LOCKUP on cpu (\d+)|Watchdog CPU:(\d+) Hard LOCKUP|not syncing: Hard LOCKUP)/;
const hardLockup: KernelRule = {
  name: 'hard-lockup',
  keywords: ['LOCKUP'],
  match(msg) {
    const m = HARD_LOCKUP.exec(msg);
    if (!m) return null;
    const cpu = m[1] ?? m[2];
    return {
      reason: 'HardLockup',
      entity: cpu !== undefined ? `cpu:${cpu}` : '',
      summary: `CPU ${cpu ?? '(unknown)'} stuck with interrupts off (hard lockup)`,
      ...(cpu !== undefined ? { attrs: { cpu: Number(cpu) } } : {}),
    };
  },
};

const HUNG_TASK = /\btask (.+):(\d+) blocked for more than (\d+)(?: seconds|s)\b/;
const appBlocked: KernelRule = {
  name: 'hung-task',
  keywords: ['blocked for more than'],
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

const SEGFAULT = /(\S{1,64})\[(\d{1,10})\]: segfault at /;
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

// The head of a splat, at the start of the message or after any prefix this parser did not know
// (a word boundary before it: "DEBUG: " does not count). User-space "traps: x[1] general protection
// fault" lines are AppCrash (an earlier rule); a WARNING splat is not a BUG (the kernel check counts
// WARNINGs).
const KERNEL_BUG_HEAD =
  /(?:^|[\s\]:>])(?:BUG: |kernel BUG at |Oops(?::| -)|Internal error: Oops|general protection fault[,:]|divide error: \d+ \[#|invalid opcode: \d+ \[#|Kernel panic - not syncing)/;
const KERNEL_BUG_ANY = /[Uu]nable to handle kernel (?:NULL pointer dereference|paging request)/;
const kernelBug: KernelRule = {
  name: 'kernel-bug',
  keywords: ['BUG', 'Oops', 'general protection fault', 'nable to handle kernel', 'divide error', 'invalid opcode', 'Kernel panic'],
  match(msg) {
    if (!KERNEL_BUG_HEAD.test(msg) && !KERNEL_BUG_ANY.test(msg)) return null;
    return { reason: 'KernelBug', entity: '', summary: 'kernel BUG/Oops' };
  },
};

// 5.x/6.x "Out of memory: Killed process 1 (x) total-vm:..." and "Memory cgroup out of memory: Killed
// process ..."; 4.x "Out of memory: Kill process 1 (x) score 900 or sacrifice child" followed by
// "Killed process 1 (x) total-vm:..."; 2.6/3.x "Killed process 1, UID 0, (x) total-vm:..."; and the
// one-line summary "oom-kill:constraint=...,task=x,pid=1,uid=0" (4.19+); RHEL 7 puts ", UID 1000," after the name. Each says a process was
// killed, so each raises OOMKilling (one kill's lines are one finding in the engine).
const OOM =
  /(Memory cgroup out of memory: |Out of memory(?: \([^)]*\))?: )?Kill(?:ed)? process (\d+)(?:, UID \d+,)? \(([^)]*)\)(?:, UID \d+,)?( total-vm:| score \d+ or sacrifice child)?/;
const OOM_SUMMARY = /oom-kill:constraint=([A-Z_]+),.*?\btask=([^,]*),pid=(\d+)/;
const oomKill: KernelRule = {
  name: 'oom-kill',
  keywords: ['Killed process', 'Kill process', 'oom-kill:'],
  prefilter: ['Kill', 'oom-kill:'],
  match(msg) {
    const s = OOM_SUMMARY.exec(msg);
    if (s) {
      const cgroup = s[1] === 'CONSTRAINT_MEMCG';
      return {
        reason: 'OOMKilling',
        entity: '',
        summary: `${cgroup ? 'memory cgroup ' : ''}OOM killer killed ${s[2]} (pid ${s[3]})`,
        attrs: { pid: Number(s[3]), process: s[2], cgroup },
      };
    }
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

// ------------------------------------------------------------------ machine checks

// "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 5: bea0000000000108": the bank's MCi_STATUS
// says whether the error was corrected (bit 61, UC, clear) or not. "Machine Check Exception" without
// a readable status is uncorrected (the #MC exception is raised for those).
const MCE_BANK = /Machine Check( Exception)?: [0-9a-fA-F]+ Bank \d+: ([0-9a-fA-F]{16})\b/;
const MCE_UNCORRECTED =
  /Machine Check Exception: [0-9a-fA-F]+$|Machine check: Processor context corrupt|Kernel panic: CPU context corrupt|[Ff]atal [Mm]achine check|Uncorrected hardware memory error|EDAC MC\d+: \d+ UE /;
const MCE_CORRECTED = /Machine check events logged|CMCI storm detected|EDAC MC\d+: \d+ CE /;
const machineCheck: KernelRule = {
  name: 'machine-check',
  keywords: ['Machine Check', 'Machine check', 'EDAC MC', 'CMCI storm', 'Uncorrect', 'Kernel panic'],
  prefilter: ['Machine', 'EDAC MC', 'CMCI storm', 'Uncorrect', 'Kernel panic'],
  match(msg) {
    const b = MCE_BANK.exec(msg);
    let uncorrected: boolean;
    if (b) uncorrected = (BigInt(`0x${b[2]}`) >> 61n) & 1n ? true : false;
    else if (MCE_UNCORRECTED.test(msg)) uncorrected = true;
    else if (MCE_CORRECTED.test(msg)) uncorrected = false;
    else return null;
    return {
      reason: uncorrected ? 'MachineCheckUncorrected' : 'MachineCheckCorrected',
      entity: '',
      summary: `machine check: ${uncorrected ? 'uncorrected' : 'corrected'} hardware error`,
      ...(b ? { attrs: { status: b[2].toLowerCase() } } : {}),
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
  /(?:(\S{1,64}) )?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: severity=(Corrected|Correctable|Uncorrect(?:ed|able) \((?:Non-Fatal|Fatal)\))(?:, type=([A-Za-z ]+))?/;
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

// The "... error received" header before the detail lines. A corrected one raises nothing (its
// "PCIe Bus Error: severity=Corrected" detail line counts toward the threshold, once); an
// uncorrectable one raises like its detail line, on the device it names. Shapes: 4.x "AER: Multiple
// Uncorrected (Fatal) error received: id=0010", 5.x "AER: Uncorrected (Non-Fatal) error received:
// 0000:00:00.0", 6.x "AER: Uncorrectable (Fatal) error message received from 0000:80:1b.4".
const AER_HEAD =
  /(?:(\S{1,64}) )?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): AER: (Multiple )?Uncorrect(?:ed|able) \((Non-Fatal|Fatal)\) error (?:message )?received(?: from|:) (?:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])|id=([0-9a-fA-F]{4}))/;
const aerHead: KernelRule = {
  name: 'pcie-aer-received',
  keywords: ['Uncorrect'],
  match(msg, env) {
    const m = AER_HEAD.exec(msg);
    if (!m) return null;
    const port = m[2].toLowerCase();
    let bdf = m[5]?.toLowerCase();
    if (!bdf && m[6]) {
      // A 4.x requester id: bus << 8 | device << 3 | function, in the reporting port's domain.
      const id = parseInt(m[6], 16);
      const hex = (n: number) => n.toString(16).padStart(2, '0');
      bdf = `${port.slice(0, port.length - 7)}${hex(id >> 8)}:${hex((id >> 3) & 0x1f)}.${id & 7}`;
    }
    const device = bdf ?? port;
    const fatal = m[4] === 'Fatal';
    const attrs: Record<string, string> = { device, severity: `Uncorrectable (${m[4]})`, reportedBy: port };
    const gpu = env.gpuAbove?.(device);
    if (gpu) attrs.gpu = gpu;
    return {
      reason: fatal ? 'PCIeUncorrectableError' : 'PCIeUncorrectableNonFatal',
      entity: `pci:${device}`,
      summary: `PCIe uncorrectable ${fatal ? 'fatal' : 'non-fatal'} error${m[3] ? 's' : ''} reported for ${device}${gpu ? ` above GPU ${gpu}` : ''}`,
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
  prefilter: ['error, dev ', 'I/O '],
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

// NVMe: command timeouts ("I/O 123 QID 4 timeout, aborting"; 6.x "I/O tag 12 (100c) opcode 0x1 (I/O
// Cmd) QID 3 timeout, reset controller"), a dead controller, and the per-command status log of 5.15+
// ("nvme0n1: Read(0x2) @ LBA 0, 8 blocks, Unrecovered Read Error (sct 0x2 / sc 0x81) DNR").
const NVME_CTRL =
  /nvme (nvme\d+): (?:I\/O .{0,80}?QID \d+ timeout|controller is down|Device not ready; aborting|Removing after probe failure|Identify Controller failed|Disabling device after reset failure)/;
const NVME_CMD = /(nvme\d+n\d+): .{1,60} @ LBA \d+, \d+ blocks, .{1,60}\(sct 0x[0-9a-fA-F]+ \/ sc 0x[0-9a-fA-F]+\)/;
const nvme: KernelRule = {
  name: 'nvme-error',
  keywords: ['nvme'],
  match(msg) {
    const m = NVME_CTRL.exec(msg) ?? NVME_CMD.exec(msg);
    if (!m) return null;
    return { reason: 'BlockDeviceIOError', entity: `blockdev:${m[1]}`, summary: `NVMe error on ${m[1]}`, attrs: { device: m[1] } };
  },
};

// SCSI: the failed command's head line ("FAILED Result: hostbyte=...", 5.x+ also "UNKNOWN(0x2003)
// Result: hostbyte=0x00 driverbyte=0x08") and command timeouts. Sense and CDB detail lines below the
// head line raise nothing more.
const SCSI =
  /sd \d+:\d+:\d+:\d+: (?:\[(\w+)\] )?(?:tag#\d+ )?(?:(?:FAILED|UNKNOWN\(0x[0-9a-fA-F]+\)) Result: hostbyte|timing out command|rejecting I\/O to offline device)/;
const scsi: KernelRule = {
  name: 'scsi-error',
  keywords: ['Result: hostbyte', 'timing out command', 'I/O to offline'],
  prefilter: ['Result: hostbyte', 'timing out command', 'I/O '],
  match(msg, env) {
    const m = SCSI.exec(msg);
    if (!m) return null;
    const dev = m[1];
    if (dev && env.ignoredBlockDevices.test(dev)) return null;
    return {
      reason: 'BlockDeviceIOError',
      entity: dev ? `blockdev:${dev}` : '',
      summary: `SCSI command failed${dev ? ` on ${dev}` : ''}`,
      ...(dev ? { attrs: { device: dev } } : {}),
    };
  },
};

// "EXT4-fs error (device sda1): ...", and the lines that say the filesystem holds errors: "I/O error
// while writing superblock", the periodic "error count since last fsck: 627" (older "error count: 2"),
// and "warning: mounting fs with errors".
const EXT4_ERR =
  /EXT4-fs error(?: \(device ([^)]+)\))?|EXT4-fs \(([^)]+)\): (?:I\/O error while writing superblock|error count(?: since last fsck)?: \d|warning: mounting fs with errors)/;
const ext4: KernelRule = {
  name: 'ext4-error',
  keywords: ['EXT4-fs error', 'I/O error', 'error count', 'fs with errors'],
  prefilter: ['EXT4-fs'],
  match(msg) {
    const m = EXT4_ERR.exec(msg);
    // "EXT4-fs error: 1267 callbacks suppressed" is the rate limiter: the errors it stands for raised.
    if (!m || msg.includes('callbacks suppressed')) return null;
    const dev = m[1] ?? m[2];
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
  prefilter: ['XFS', 'xfs_do_force_shutdown'],
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

// XFS errors short of a shutdown: corruption found, metadata I/O errors, internal errors.
const XFS_ERR =
  /XFS \(([^)]+)\): (?:Metadata corruption detected|Metadata CRC error detected|Corruption detected|Corruption of in-memory data detected|metadata I\/O error|Internal error|log I\/O error)/;
const xfsError: KernelRule = {
  name: 'xfs-error',
  keywords: ['orruption', 'I/O error', 'Internal error', 'CRC error'],
  prefilter: ['XFS'],
  match(msg) {
    const m = XFS_ERR.exec(msg);
    if (!m) return null;
    return { reason: 'XFSError', entity: `blockdev:${m[1]}`, summary: `XFS error on ${m[1]}`, attrs: { device: m[1] } };
  },
};

const RO_REMOUNT = /(?:\S{1,64} \(([^)]{1,64})\): )?Remounting filesystem read-only/;
// Searched only before the last "forced readonly" (found by indexOf): a `.*` between two parts
// would take time quadratic in a line that repeats the first part.
const BTRFS_RO = /BTRFS.{0,64}?\(device ([^)]{1,64})\)/;
const readOnly: KernelRule = {
  name: 'filesystem-read-only',
  keywords: ['Remounting filesystem read-only', 'forced readonly'],
  match(msg) {
    const ro = msg.lastIndexOf('forced readonly');
    const m = RO_REMOUNT.exec(msg) ?? (ro > 0 ? BTRFS_RO.exec(msg.slice(0, ro)) : null);
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
  hardLockup,
  appBlocked,
  appCrash,
  machineCheck,
  kernelBug,
  oomKill,
  cper,
  aer,
  aerHead,
  conntrack,
  blockIo,
  nvme,
  scsi,
  ext4,
  xfs,
  xfsError,
  readOnly,
];
