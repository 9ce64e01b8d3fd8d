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
  /**
   * The line says the entity recovered: the classifier reports these reasons healthy for the
   * entity (clearing their whenHealthy problems) and raises no finding ("nfs: server X OK").
   */
  clears?: readonly ReasonName[];
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
// R550+ also asserts "Back to back GSP RPC timeout detected! GPU marked for reset" (its Xid 154 says the reset).
// An assertion or check that a call timed out ("Call timed out [NV_ERR_TIMEOUT] (0x00000065) returned from
// <call> @ <file>") is a GSP timeout when the call it names is a GSP RPC or GSP wait (rpc..., ...Rpc..., kgsp...,
// ..._GSP) or a control sent to the physical RM through the GPU's internal handles ("pRmApi->Control(pRmApi,
// pGpu->hInternalClient, pGpu->hInternalSubdevice, NV2080_CTRL_CMD_INTERNAL_...)": on a GSP GPU that is an RPC);
// other NV_ERR_TIMEOUTs (a memory scrub, a cache flush, a display channel) say nothing about the GSP and raise
// nothing. The same timeout as a bare status: an RM control forwarded to the GSP failing with 0x65
// ("NVRM_RPC: NV2080_CTRL_CMD_MC_SERVICE_INTERRUPTS failed with error 0x65"; other codes raise nothing), and the
// driver's note once RPC timeouts pass its reset threshold ("Rate limiting GSP RPC error prints for GPU at
// PCI:... The GPU likely needs to be reset."): a timeout too; the Xid 119/154 beside it carries the Fatal.
const GSP_TIMEOUT =
  /_kgspLogRpcTimeout|_kgspLogXid119|_kgspIsHeartbeatTimedOut|[Hh]eartbeat timed out|Timeout waiting for RPC from GSP|rpcRecvPoll timedout|Back to back GSP RPC timeout|Rate limiting GSP RPC error prints|NVRM_RPC: \w{1,96} failed with error 0x65\b|\[NV_ERR_TIMEOUT\][^@]{0,40}returned from [^@]{0,200}?(?:[Rr]pc|[Gg]sp|GSP|hInternal)/;
const GSP_RATE_PCI = new RegExp(`GSP RPC error prints for GPU at (${PCI})`);
const gspTimeout: KernelRule = {
  name: 'nvidia-gsp-timeout',
  keywords: [
    '_kgspLog',
    'eartbeat timed out',
    'Timeout waiting for RPC from GSP',
    'pcRecvPoll timedout',
    'GSP RPC timeout',
    'GSP RPC error prints',
    'failed with error 0x65',
    '[NV_ERR_TIMEOUT]',
  ],
  prefilter: ['NVRM'],
  match(msg): RuleHit | null {
    if (!msg.includes('NVRM') || !GSP_TIMEOUT.test(msg)) return null;
    const g = GSP_GPU.exec(msg);
    const p = GSP_RATE_PCI.exec(msg);
    const pci = p ? normalizePci(p[1]) : undefined;
    // "GPU6" is the driver's instance number, not a PCI address, so it goes to attrs only; so does the
    // rate-limit note's PCI address, so that one GPU's GSP timeouts stay one problem whatever line said them.
    return {
      reason: 'NvidiaGSPTimeout',
      entity: '',
      summary: `NVIDIA GSP firmware timeout${g ? ` on GPU${g[1]}` : pci ? ` on GPU ${pci}` : ''}`,
      ...(g ? { attrs: { gpuIndex: Number(g[1]) } } : pci ? { attrs: { pci } } : {}),
    };
  },
};

// A GPU the driver never took, summed up by the driver once it has probed every NVIDIA device: "The
// NVIDIA probe routine was not called for 3 device(s)." (another driver owns them), "No NVIDIA devices
// probed." / R3xx "No NVIDIA graphics adapter probed!", "No NVIDIA GPU found." / "No NVIDIA graphics adapter
// found!", "None of the NVIDIA devices were initialized." / "None of the NVIDIA graphics adapters were
// initialized!". And a GPU that needs a reset, seen in a GSP call failing with NV_ERR_RESET_REQUIRED (0x62):
// "GspRmAlloc failed: ... status=0x00000062", "Assertion failed: Reset required [NV_ERR_RESET_REQUIRED]",
// nvidia-modeset's "Failed to initialize display engine: 0x62 (Reset required [NV_ERR_RESET_REQUIRED])".
const NOT_PROBED =
  /NVRM: (?:The NVIDIA probe routine was not called for (\d+) device|No NVIDIA (?:devices|graphics adapter) probed|No NVIDIA (?:GPU|graphics adapter) found|None of the NVIDIA (?:devices|graphics adapters) were initiali[sz]ed)/;
const RESET_REQUIRED = /\[NV_ERR_RESET_REQUIRED\]|NVRM:? rpcRmApi\w{1,32}_GSP: GspRm\w{1,16} failed: .{0,512}?\bstatus=0x00000062\b/;
const gpuUnusable: KernelRule = {
  name: 'nvidia-gpu-unusable',
  keywords: [
    'NVIDIA probe routine was not called',
    'probed',
    'No NVIDIA',
    'None of the NVIDIA',
    'NV_ERR_RESET_REQUIRED',
    'status=0x00000062',
  ],
  prefilter: ['NVRM', 'NV_ERR_RESET_REQUIRED'],
  match(msg): RuleHit | null {
    const n = NOT_PROBED.exec(msg);
    if (n) {
      return {
        reason: 'NvidiaGPUNotProbed',
        entity: '',
        summary: n[1] ? `the NVIDIA driver did not probe ${n[1]} GPU(s) (another driver owns them)` : 'the NVIDIA driver brought up no GPU',
        ...(n[1] ? { attrs: { devices: Number(n[1]) } } : {}),
      };
    }
    if (!RESET_REQUIRED.test(msg)) return null;
    const g = GSP_GPU.exec(msg);
    return {
      reason: 'NvidiaGPUResetRequired',
      entity: '',
      summary: `NVIDIA GPU${g ? ` ${g[1]}` : ''} needs a reset (NV_ERR_RESET_REQUIRED)`,
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
    // "segfault at" or "traps:", then " in libnccl.so" later in the line; found by indexOf, as a
    // `.*` between them is tried from every copy of the first to the end of a hostile line.
    const lib = msg.lastIndexOf(' in libnccl.so');
    if (lib < 0 || !/segfault at|traps:/.test(msg.slice(0, lib))) return null;
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
// The panic softlockup_panic makes of it names the cause, not the CPU (the BUG line before it does).
const SOFT_LOCKUP_PANIC = 'not syncing: softlockup: hung tasks';
const softLockup: KernelRule = {
  name: 'soft-lockup',
  keywords: ['soft lockup - CPU#', SOFT_LOCKUP_PANIC],
  prefilter: ['BUG', SOFT_LOCKUP_PANIC],
  match(msg) {
    const m = SOFT_LOCKUP.exec(msg);
    if (!m) {
      if (!msg.includes(SOFT_LOCKUP_PANIC)) return null;
      return { reason: 'SoftLockup', entity: '', summary: 'kernel panic on a soft lockup (softlockup_panic)' };
    }
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

// RCU CPU stall warnings. The header, 2.6.3x to 6.x: "INFO: rcu_sched_state detected stall on CPU 0 (t=15000
// jiffies)", "INFO: rcu_sched detected stalls on CPUs/tasks: { 2} (detected by 7, t=15002 jiffies)", "INFO:
// rcu_sched self-detected stall on CPU { 3}  (t=6000 jiffies ...)", 4.x+ "rcu: INFO: rcu_preempt
// self-detected stall on CPU" and "... detected stalls on CPUs/tasks:" with the CPUs on the lines after, and
// expedited "rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { 0-... } 6 jiffies s: 85 root:
// 0x1/." (a "P392" in the braces is a preempted task, not a CPU). The per-CPU detail line of 4.x+, "rcu:
// \t3-...!: (1 GPs behind) idle=..." / "\t0-....: (5249 ticks this GP) idle=...", names the stalled CPU.
const RCU_HEAD =
  /\b(rcu_(?:sched|preempt|bh))(?:_state)? (self-)?detected (expedited )?stalls? on CPU(?:s\/tasks)?(?: (\d{1,5})\b|:? *\{([^}]{0,256})\})?/;
const RCU_CPU = /^(?:rcu: )?\s*(\d{1,5})(?:-[.A-Za-z!0-9]{3,6})?: \(\d+ (?:GPs behind|ticks this GP)\) idle=/;
const rcuStall: KernelRule = {
  name: 'rcu-stall',
  keywords: ['stall', 'GPs behind', 'ticks this GP'],
  match(msg) {
    const d = RCU_CPU.exec(msg);
    if (d) return { reason: 'RCUStall', entity: `cpu:${d[1]}`, summary: `RCU stall on CPU ${d[1]}`, attrs: { cpu: Number(d[1]) } };
    const m = RCU_HEAD.exec(msg);
    if (!m) return null;
    const cpus = m[4] !== undefined ? [m[4]] : (m[5] ?? '').split(/\s+/).flatMap((t) => /^(\d{1,5})(?:-|$)/.exec(t)?.[1] ?? []);
    const kind = `${m[2] ? 'self-detected ' : ''}${m[3] ? 'expedited ' : ''}${m[1]} stall`;
    const attrs: Record<string, string | number> = { flavor: m[1] };
    if (cpus.length === 1) attrs.cpu = Number(cpus[0]);
    else if (cpus.length > 1) attrs.cpus = cpus.join(',');
    return {
      reason: 'RCUStall',
      entity: cpus.length === 1 ? `cpu:${cpus[0]}` : '',
      summary: `RCU ${kind}${cpus.length ? ` on CPU ${cpus.join(', ')}` : ''}`,
      attrs,
    };
  },
};

// The comm is at most 15 characters: a bounded run keeps a line of many "task " copies linear.
const HUNG_TASK = /\btask (.{1,64}):(\d{1,10}) blocked for more than (\d{1,10})(?: seconds|s)\b/;
// hung_task_panic's panic names the cause; the "task ... blocked" lines before it name the tasks.
const HUNG_TASK_PANIC = 'not syncing: hung_task: blocked tasks';
const appBlocked: KernelRule = {
  name: 'hung-task',
  keywords: ['blocked for more than', HUNG_TASK_PANIC],
  match(msg) {
    const m = HUNG_TASK.exec(msg);
    if (!m) {
      if (!msg.includes(HUNG_TASK_PANIC)) return null;
      return { reason: 'AppBlocked', entity: '', summary: 'kernel panic on a hung task (hung_task_panic)' };
    }
    return {
      reason: 'AppBlocked',
      entity: '',
      summary: `task ${m[1]} (pid ${m[2]}) blocked for more than ${m[3]}s`,
      attrs: { process: m[1], pid: Number(m[2]), seconds: Number(m[3]) },
    };
  },
};

// The kernel prints the task's comm before "[pid]": "%s[%d]: segfault at" and "traps: %s[%d] ...". A
// comm may hold spaces (Firefox's "Web Content"); it starts after any prefix the parser left (a
// "kernel: " ident, a "] " timestamp end), so the name has no ':' or brackets in the segfault form.
const SEGFAULT = /([^\s[\]:][^[\]:]{0,63})\[(\d{1,10})\]: segfault at /;
const TRAP = /traps: ([^\s[\]][^[\]]{0,63})\[(\d{1,10})\] /;
const appCrash: KernelRule = {
  name: 'app-crash',
  keywords: ['segfault at ', 'traps: '],
  match(msg) {
    const m = SEGFAULT.exec(msg) ?? TRAP.exec(msg);
    if (!m) return null;
    const program = m[1].trimEnd();
    // One problem (and one Event series in the Kubernetes sink) per program, never per pid: a
    // program that aborts every few seconds is one series with a count, another program its own.
    return {
      reason: 'AppCrash',
      entity: `program:${program}`,
      summary: `process ${program} (pid ${m[2]}) crashed`,
      attrs: { process: program, pid: Number(m[2]) },
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
  /(Memory cgroup out of memory: |Out of memory(?: \([^)]{0,64}\))?: )?Kill(?:ed)? process (\d{1,10})(?:, UID \d{1,10},)? \(([^)]{0,64})\)(?:, UID \d{1,10},)?( total-vm:| score \d{1,10} or sacrifice child)?/;
// Bounded runs, and the task looked for after the constraint (not by `.*?` from every copy of it).
const OOM_SUMMARY = /oom-kill:constraint=([A-Z_]{1,32}),/;
const OOM_SUMMARY_TASK = /\btask=([^,]{0,64}),pid=(\d{1,10})/;
const oomKill: KernelRule = {
  name: 'oom-kill',
  keywords: ['Killed process', 'Kill process', 'oom-kill:'],
  prefilter: ['Kill', 'oom-kill:'],
  match(msg) {
    const c = OOM_SUMMARY.exec(msg);
    const s = c && OOM_SUMMARY_TASK.exec(msg.slice(c.index + c[0].length));
    if (c && s) {
      const cgroup = c[1] === 'CONSTRAINT_MEMCG';
      return {
        reason: 'OOMKilling',
        entity: '',
        summary: `${cgroup ? 'memory cgroup ' : ''}OOM killer killed ${s[1]} (pid ${s[2]})`,
        attrs: { pid: Number(s[2]), process: s[1], cgroup },
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
// The panics that name a machine check: "Fatal machine check" (also "... on current CPU"), "Fatal
// local machine check" (5.x+ LMCE), and the rendezvous timeout of a broadcast #MC.
const MCE_UNCORRECTED =
  /Machine Check Exception: [0-9a-fA-F]+$|Machine check: Processor context corrupt|Kernel panic: CPU context corrupt|[Ff]atal (?:local )?[Mm]achine check|Timeout: Not all CPUs entered broadcast exception handler|Uncorrected hardware memory error|EDAC MC\d+: \d+ UE /;
const MCE_CORRECTED = /Machine check events logged|CMCI storm detected|EDAC MC\d+: \d+ CE /;
// arm64 has no machine-check exception: an error the CPU or the memory system could not contain
// reaches the kernel as an external abort. Asynchronous, an SError ("SError Interrupt on CPU3, code
// 0x00000000bf000002 -- SError", then "Kernel panic - not syncing: Asynchronous SError Interrupt"; 6.18+
// taints the kernel MACHINE_CHECK for it); synchronous, an abort the firmware's RAS handler (APEI/SEA)
// did not claim, which kills the kernel context ("Internal error: synchronous external abort:
// 96000610 [#1] PREEMPT SMP"). Errors the firmware did claim arrive as CPER records (the cper rule).
const ARM_SERROR = /SError Interrupt on CPU(\d{1,5}), code (?:0x)?([0-9a-fA-F]{1,16})/;
const ARM_SEA = /Internal error: synchronous external abort: (?:0x)?([0-9a-fA-F]{1,16})\b/;
const ARM_SERROR_PANIC = 'not syncing: Asynchronous SError Interrupt';

/** An arm64 external abort line as an uncorrected machine check, or null. */
function armExternalAbort(msg: string): RuleHit | null {
  const s = ARM_SERROR.exec(msg);
  if (s) {
    const attrs = { cpu: Number(s[1]), esr: s[2].toLowerCase(), abort: 'SError' };
    return { reason: 'MachineCheckUncorrected', entity: '', summary: `arm64 SError (asynchronous external abort) on CPU ${s[1]}`, attrs };
  }
  const a = ARM_SEA.exec(msg);
  if (a) {
    const attrs = { esr: a[1].toLowerCase(), abort: 'synchronous external abort' };
    return { reason: 'MachineCheckUncorrected', entity: '', summary: 'arm64 synchronous external abort in the kernel', attrs };
  }
  if (msg.includes(ARM_SERROR_PANIC))
    return { reason: 'MachineCheckUncorrected', entity: '', summary: 'kernel panic on an arm64 SError', attrs: { abort: 'SError' } };
  return null;
}

const machineCheck: KernelRule = {
  name: 'machine-check',
  keywords: [
    'Machine Check',
    'Machine check',
    'EDAC MC',
    'CMCI storm',
    'Uncorrect',
    'Kernel panic',
    'SError Interrupt',
    'synchronous external abort',
  ],
  prefilter: ['Machine', 'EDAC MC', 'CMCI storm', 'Uncorrect', 'Kernel panic', 'SError', 'external abort'],
  match(msg) {
    if (msg.includes('SError') || msg.includes('external abort')) {
      const arm = armExternalAbort(msg);
      if (arm) return arm;
    }
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

// ------------------------------------------------------------------ records from the previous boot

/**
 * How far into a boot a machine-check record found by the boot-time poll may still be printed: the
 * poll runs as each CPU comes up and its records are printed from a work item soon after (0.06 s on
 * the boot CPU, within the SMP bring-up for the others; 60 s leaves room for slow late initcalls).
 */
export const PREVIOUS_BOOT_WINDOW_MS = 60_000;

/** The header under which the kernel prints the firmware's BERT records ("BERT: " is its pr_fmt). */
export const BERT_HEAD = 'BERT: Error records from previous boot';

// A bank record found by polling: "Machine Check: <MCG status>" without "Exception" (MCIP clear), which
// is also why the kernel prints "TSC 0" after it (the boot-time poll takes no timestamp).
const MCE_POLLED = /(?:CPU (\d{1,5}): )?Machine Check: ([0-9a-fA-F]{1,16}) Bank (\d{1,3}): ([0-9a-fA-F]{16})\b/;

/**
 * A machine-check hit logged `uptimeMs` into the boot: PreviousBootHardwareError when the line is a
 * record of the boot-time poll (a polled bank record, or "Machine check events logged") within
 * PREVIOUS_BOOT_WINDOW_MS, else null (the hit stands). Records the CPU raised as an exception
 * ("Machine Check Exception", the panic lines) are this boot's at any time.
 */
export function previousBootMachineCheck(msg: string, hit: RuleHit, uptimeMs: number): RuleHit | null {
  if (hit.reason !== 'MachineCheckCorrected' && hit.reason !== 'MachineCheckUncorrected') return null;
  if (!(uptimeMs >= 0 && uptimeMs <= PREVIOUS_BOOT_WINDOW_MS)) return null;
  const secs = Math.round(uptimeMs) / 1000;
  const b = MCE_POLLED.exec(msg);
  if (b) {
    const status = BigInt(`0x${b[4]}`);
    const uc = ((status >> 61n) & 1n) === 1n;
    const en = ((status >> 60n) & 1n) === 1n;
    const pcc = ((status >> 57n) & 1n) === 1n;
    const attrs: Record<string, string | number | boolean> = {
      status: b[4].toLowerCase(),
      mcgStatus: b[2].toLowerCase(),
      bank: Number(b[3]),
      uc,
      en,
      pcc,
      bootSeconds: secs,
      wouldBe: hit.reason,
    };
    if (b[1] !== undefined) attrs.cpu = Number(b[1]);
    const bits = `${uc ? 'UC' : 'corrected'}${pcc ? ', PCC' : ''}, EN ${en ? 'set' : 'clear'}`;
    return {
      reason: 'PreviousBootHardwareError',
      entity: '',
      summary:
        `machine-check record from before this boot: bank ${b[3]} status ${attrs.status} (${bits}) found by the boot-time poll ` +
        `(MCG status ${attrs.mcgStatus}, no exception) ${secs} s into the boot; in this boot's time it would be ${hit.reason}`,
      attrs,
    };
  }
  if (!msg.includes('Machine check events logged')) return null;
  return {
    reason: 'PreviousBootHardwareError',
    entity: '',
    summary: `machine-check events logged ${secs} s into the boot by the boot-time poll: records from before this boot`,
    attrs: { bootSeconds: secs, wouldBe: hit.reason },
  };
}

/** A CPER hit printed under the BERT header: the firmware's record of the previous boot's error. */
export function previousBootCper(hit: RuleHit): RuleHit | null {
  if (hit.reason !== 'HardwareErrorFatal' && hit.reason !== 'HardwareErrorCorrected') return null;
  const severity = hit.attrs?.severity ?? 'unknown';
  return {
    reason: 'PreviousBootHardwareError',
    entity: '',
    summary: `BERT record from the previous boot, event severity ${severity}; in this boot's time it would be ${hit.reason}`,
    attrs: { severity, source: 'BERT', wouldBe: hit.reason },
  };
}

const CPER = /\[Hardware Error\]: event severity: (fatal|corrected|recoverable)\b/;
const cper: KernelRule = {
  name: 'cper-hardware-error',
  // The BERT header raises nothing itself: the classifier marks the records printed under it.
  keywords: ['[Hardware Error]: event severity', BERT_HEAD],
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

// ------------------------------------------------------------------ IOMMU (Arm SMMUv3)

// The SMMUv3 event queue: "arm-smmu-v3 arm-smmu-v3.5.auto: event 0x10 received:" and its raw dwords,
// and on 6.13+ the decoded line "event: F_TRANSLATION client: 0001:06:00.0 sid: 0x20600 ssid: 0x0 iova:
// 0xff9bc000 ipa: 0x0": a device's DMA the SMMU refused (a driver bug or a device gone astray). The header
// and the decoded line raise IOMMUFault on the SMMU, one problem per SMMU however many events it logs (the
// client, where named, goes to attrs); the raw dwords and the access line ("unpriv data write s1 ...") raise
// nothing. The SMMU itself failing is IOMMUError: a CMD_SYNC that timed out (its invalidations are not known
// to have completed, so DMA through it can no longer be trusted) or a global error, which the driver calls
// "unexpected ... this could be serious"; its "CMDQ error (cons ...): <cause>" detail line raises nothing.
// After a forced unbind the device prints as "platform arm-smmu-v3.0.auto:".
const SMMU_DEV = /(?:^|\s)(?:arm-smmu-v3|platform) ([\w.-]{1,64}): /;
const SMMU_EVENT = /: event 0x([0-9a-fA-F]{2}) received/;
const SMMU_DECODED = /: event: (\w{1,32}) client: (\S{1,64}) sid: (0x[0-9a-fA-F]{1,8})/;
const SMMU_FAILED = /CMD_SYNC timeout at|unexpected global error reported \((0x[0-9a-fA-F]{1,8})\)/;
// SMMUv3 event record ids (Arm IHI 0070, event queue records).
const SMMU_EVENT_NAMES: Record<number, string> = {
  0x01: 'F_UUT',
  0x02: 'C_BAD_STREAMID',
  0x03: 'F_STE_FETCH',
  0x04: 'C_BAD_STE',
  0x05: 'F_BAD_ATS_TREQ',
  0x06: 'F_STREAM_DISABLED',
  0x07: 'F_TRANSL_FORBIDDEN',
  0x08: 'C_BAD_SUBSTREAMID',
  0x09: 'F_CD_FETCH',
  0x0a: 'C_BAD_CD',
  0x0b: 'F_WALK_EABT',
  0x10: 'F_TRANSLATION',
  0x11: 'F_ADDR_SIZE',
  0x12: 'F_ACCESS',
  0x13: 'F_PERMISSION',
  0x20: 'F_TLB_CONFLICT',
  0x21: 'F_CFG_CONFLICT',
  0x24: 'E_PAGE_REQUEST',
  0x25: 'F_VMS_FETCH',
};
const smmu: KernelRule = {
  name: 'arm-smmu-v3',
  keywords: ['arm-smmu-v3'],
  match(msg): RuleHit | null {
    const d = SMMU_DEV.exec(msg);
    if (!d) return null;
    const entity = `smmu:${d[1]}`;
    const f = SMMU_FAILED.exec(msg);
    if (f) {
      const what = f[1] ? `global error ${f[1]}` : 'CMD_SYNC timeout';
      return { reason: 'IOMMUError', entity, summary: `Arm SMMUv3 ${d[1]} failed: ${what}`, attrs: { smmu: d[1], error: what } };
    }
    const c = SMMU_DECODED.exec(msg);
    if (c) {
      const attrs: Record<string, string> = { smmu: d[1], event: c[1], client: c[2].toLowerCase(), sid: c[3] };
      return { reason: 'IOMMUFault', entity, summary: `Arm SMMUv3 ${d[1]} refused DMA from ${c[2]} (${c[1]})`, attrs };
    }
    const e = SMMU_EVENT.exec(msg);
    if (!e) return null;
    const id = parseInt(e[1], 16);
    const name = SMMU_EVENT_NAMES[id] ?? `event 0x${e[1].toLowerCase()}`;
    return {
      reason: 'IOMMUFault',
      entity,
      summary: `Arm SMMUv3 ${d[1]} event ${name}`,
      attrs: { smmu: d[1], event: name, eventId: id },
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
  /EXT4-fs error(?: \(device ([^)]{1,64})\))?|EXT4-fs \(([^)]{1,64})\): (?:I\/O error while writing superblock|error count(?: since last fsck)?: \d|warning: mounting fs with errors)/;
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

// "XFS (dev): " and, later in the line, what says it shut down: the words are found first and the
// device before them, as a `.*` between the two is tried from every "XFS (" to the end of the line.
const XFS_DOWN_WORDS = /Shutting down filesystem|xfs_do_force_shutdown|[Ff]ilesystem has been shut down/g;
const XFS_DEV = /XFS \(([^)]{1,64})\): /;
// The 2.6-era wording, without the "XFS (dev): " prefix: 'xfs_force_shutdown(dm-0,0x8) called from line
// ...' and 'Filesystem "dm-0": I/O Error Detected.  Shutting down filesystem: dm-0'.
const XFS_DOWN_OLD = /xfs_force_shutdown\(([^,()\s]{1,64}),0x[0-9a-fA-F]{1,8}\) called from|Shutting down filesystem: ([^\s"]{1,64})/;
const xfs: KernelRule = {
  name: 'xfs-shutdown',
  keywords: ['Shutting down filesystem', 'xfs_do_force_shutdown', 'has been shut down', 'xfs_force_shutdown('],
  prefilter: ['XFS', 'xfs_do_force_shutdown', 'xfs_force_shutdown(', 'Shutting down filesystem: '],
  match(msg) {
    const down = xfsDownDevice(msg);
    const old = down ? null : XFS_DOWN_OLD.exec(msg);
    if (!down && !old && !msg.includes('xfs_do_force_shutdown')) return null;
    const dev = down ?? old?.[1] ?? old?.[2];
    return {
      reason: 'XFSShutdown',
      entity: dev ? `blockdev:${dev}` : '',
      summary: `XFS shut down${dev ? ` on ${dev}` : ''}`,
      ...(dev ? { attrs: { device: dev } } : {}),
    };
  },
};

/** The device of an "XFS (dev): ..." line that says the filesystem shut down. */
function xfsDownDevice(msg: string): string | undefined {
  let last = -1;
  XFS_DOWN_WORDS.lastIndex = 0;
  for (let w = XFS_DOWN_WORDS.exec(msg); w; w = XFS_DOWN_WORDS.exec(msg)) last = w.index;
  return last < 0 ? undefined : XFS_DEV.exec(msg.slice(0, last))?.[1];
}

// XFS errors: corruption found, metadata I/O errors, internal errors. Each raises XFSError on its own
// line, also when a shutdown follows (its lines raise XFSShutdown). The 2.6-era wording: 'Filesystem
// "dm-0": XFS internal error xfs_trans_cancel at line ...' and, with no device, 'XFS: Internal error
// XFS_WANT_CORRUPTED_RETURN at line ...'.
const XFS_ERR =
  /XFS \(([^)]{1,64})\): (?:Metadata corruption detected|Metadata CRC error detected|Corruption detected|Corruption of in-memory data detected|metadata I\/O error|Internal error|log I\/O error)/;
const XFS_ERR_OLD =
  /Filesystem "([^"]{1,64})": XFS internal error|(?:^|\s)XFS: Internal error |I\/O error in filesystem \("([^"]{1,64})"\) meta-data/;
const xfsError: KernelRule = {
  name: 'xfs-error',
  keywords: ['orruption', 'I/O error', 'Internal error', 'CRC error', 'XFS internal error'],
  prefilter: ['XFS', 'I/O error in filesystem ('],
  match(msg) {
    const m = XFS_ERR.exec(msg) ?? XFS_ERR_OLD.exec(msg);
    if (!m) return null;
    const dev = m[1] ?? m[2];
    if (dev === undefined) return { reason: 'XFSError', entity: '', summary: 'XFS internal error' };
    return { reason: 'XFSError', entity: `blockdev:${dev}`, summary: `XFS error on ${dev}`, attrs: { device: dev } };
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

// ------------------------------------------------------------------ network interfaces

// NIC drivers whose probe failure leaves an adapter unusable (the driver core's "probe of X failed").
const NIC_PROBE_FAILED =
  /\b(mlx5_core|ena|efa|ice|i40e|ixgbe|igb|bnxt_en): probe of ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) failed with error (-?\d+)/;
// "mlx5_core 0000:41:00.0: ...", "ena 0000:00:05.0 eth0: ...", "igb 0000:09:00.0: ...": the driver, the
// PCI function and, where the netdev exists, its name.
const NIC_DEV = /\b([a-z][a-z0-9_-]{1,15}) ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?: ([A-Za-z0-9_.@-]{1,15}))?: /;
// "NETDEV WATCHDOG: eth0 (ixgbe): transmit queue 0 timed out" (up to 6.1); 6.2+ prints it through
// netdev_crit: "r8125 0000:22:04.0 eth4: NETDEV WATCHDOG: CPU: 3: transmit queue 0 timed out 5010 ms".
const WATCHDOG_OLD = /NETDEV WATCHDOG: ([^\s(:]{1,15}) \(([^)]{1,32})\): transmit queue (\d+) timed out/;
// Per-driver TX hang lines, after the name the driver prints them under (the netdev, or the PCI
// function before the netdev exists): the 6.2+ watchdog, igb/ixgbe "Detected Tx Unit Hang", e1000e
// "Detected Hardware Unit Hang", i40e/ice "eth9: tx_timeout recovery level N", mlx5/ipqess "TX timeout
// on queue", mlx5 "TX timeout detected", ENA "The number of lost tx completions is above the threshold".
const TX_HANG =
  /(\S{1,32}): (?:NETDEV WATCHDOG: (?:CPU: \d+: )?transmit queue (\d+) timed out|Detected (?:Tx|Hardware) Unit Hang|tx_timeout recovery level \d|TX timeout (?:on queue|detected)|The number of lost tx completions is above the threshold)/;
const BDF = /^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$/;
// mlx5 health: the poll saw no heartbeat ("device's health compromised - reached miss count") or a fatal
// sensor ("Fatal error N detected"), the FW reported a syndrome (older "synd 0x8: unrecoverable hardware
// error", newer "Health issue observed, firmware internal error, severity(3) ERROR:", raised at severity 0-3,
// EMERG to ERROR), or a command got no answer ("ENABLE_HCA(0x104) timeout. Will cause a leak of a command
// resource"). The health buffer's detail lines (assert_var[N], assert_exit_ptr, ext_synd, fw_ver...) raise
// nothing more. ENA: "Keep alive watchdog timeout." (the device stopped its keep-alive; the driver resets).
const NIC_FW =
  /health compromised - reached miss count|Fatal error \d+ detected|\bsynd 0x[0-9a-fA-F]+: [a-z]|Health issue observed, [^,]{1,80}, severity\([0-3]\)|timeout\. Will cause a leak of a command resource|Keep alive watchdog timeout/;
const NIC_RECOVERY_FAILED = /health recovery flow aborted|health recovery failed/;

const nicFault: KernelRule = {
  name: 'nic-fault',
  // "probe of " and not ": probe of ": a word that starts with ':' costs the combined search a try at
  // every colon of every line (measured: a third of the classifier's time).
  keywords: [
    'NETDEV WATCHDOG',
    'Unit Hang',
    'tx_timeout recovery',
    'TX timeout',
    'lost tx completions',
    'health compromised',
    'Fatal error',
    'synd 0x',
    'Keep alive watchdog',
    'health recovery',
    'Health issue observed',
    'Will cause a leak',
    'probe of ',
  ],
  match(msg) {
    const p = msg.includes(': probe of ') ? NIC_PROBE_FAILED.exec(msg) : null;
    if (p) {
      const bdf = p[2].toLowerCase();
      return {
        reason: 'NetworkAdapterFailed',
        entity: `pci:${bdf}`,
        summary: `${p[1]} could not bring up network adapter ${bdf} (probe error ${p[3]})`,
        attrs: { device: bdf, driver: p[1], error: Number(p[3]) },
      };
    }
    const w = msg.includes('NETDEV WATCHDOG') ? WATCHDOG_OLD.exec(msg) : null;
    if (w) return txTimeout(w[1], undefined, w[2], { queue: Number(w[3]) });
    const h = TX_HANG.exec(msg);
    if (h) {
      const d = NIC_DEV.exec(msg);
      const pci = BDF.test(h[1]) ? h[1] : d?.[2];
      return txTimeout(BDF.test(h[1]) ? undefined : h[1], pci, d?.[1], h[2] !== undefined ? { queue: Number(h[2]) } : {});
    }
    const fatal = NIC_RECOVERY_FAILED.test(msg);
    if (!fatal && !NIC_FW.test(msg)) return null;
    const d = NIC_DEV.exec(msg);
    // "Fatal error N detected" and "synd 0x..:" are mlx5 wordings: only from an mlx5 device.
    if (!d || !(d[1].startsWith('mlx5') || d[1] === 'ena')) return null;
    const bdf = d[2].toLowerCase();
    const attrs = { device: bdf, driver: d[1] };
    return fatal
      ? { reason: 'NetworkAdapterFailed', entity: `pci:${bdf}`, summary: `${d[1]} could not recover network adapter ${bdf}`, attrs }
      : { reason: 'NetworkAdapterFirmwareError', entity: `pci:${bdf}`, summary: `network adapter ${bdf} (${d[1]}) firmware error`, attrs };
  },
};

function txTimeout(iface: string | undefined, bdf: string | undefined, driver: string | undefined, attrs: Record<string, number>): RuleHit {
  const pci = bdf?.toLowerCase();
  const entity = iface ? `netif:${iface}` : pci ? `pci:${pci}` : '';
  const all: Record<string, string | number> = { ...attrs };
  if (iface) all.interface = iface;
  if (pci) all.device = pci;
  if (driver) all.driver = driver;
  return {
    reason: 'NetworkTxTimeout',
    entity,
    summary: `transmit queue timed out on ${iface ?? pci ?? 'a network interface'}`,
    attrs: all,
  };
}

// ------------------------------------------------------------------ remote and volume storage

// "nfs: server 10.0.0.2 not responding, still trying" / "..., timed out"; "nfs: server 10.0.0.2 OK".
// NFSv4 "NFS: server X error" lines are something else; lockd's "lockd: server X not responding" is not
// the data path and raises nothing.
const NFS = /\bnfs: server (\S{1,255}) (not responding, (?:still trying|timed out)|OK)$/;
// "device-mapper: thin: 253:2: switching pool to out-of-data-space (queue IO) mode", "... to read-only
// mode", "... to failure mode" (the kernel's word for PM_FAIL, in every version), "... to write mode"
// (space added back: clears the pool's problems). 3.x kernels name no pool ("device-mapper: thin:
// switching pool to read-only mode"): a problem on no entity.
const THIN = /device-mapper: thin: (?:(\d+:\d+): )?switching pool to (out-of-data-space|read-only|fail(?:ure)?|write) /;
const THIN_REASONS: readonly ReasonName[] = ['ThinPoolOutOfSpace', 'ThinPoolReadOnly'];
const NFS_REASONS: readonly ReasonName[] = ['NFSServerNotResponding'];
// "BTRFS error (device dm-15): bdev /dev/dm-10 errs: wr 0, rd 0, flush 0, corrupt 1, gen 0" (a counter just
// grew) and "BTRFS warning (device sda2): csum failed root 257 ino 4115546 off 0 csum 0x... expected csum ...".
// The same counters printed at "BTRFS info" level when a filesystem is mounted are history (they are never
// reset by themselves) and raise nothing.
const BTRFS_ERRS =
  /BTRFS (?:error|warning) \(device ([^)]{1,64})\): bdev (\S{1,128}) errs: wr (\d+), rd (\d+), flush (\d+), corrupt (\d+), gen (\d+)/;
const BTRFS_CSUM = /BTRFS (?:error|warning|info) \(device ([^)]{1,64})\): csum failed /;
// megaraid_sas "FW in FAULT state" and its adapter reset (OCR, "resetting fusion adapter scsi0."); mpt3sas
// "fault_state(0x5862)!"; and the failures: hpsa "Controller lockup detected: 0x0015002f after 30" (and its
// lower-case follow-ups), megaraid_sas "killing adapter" / "Reset failed", mpt3sas "diag reset: FAILED".
const CTRL_FAILED = /[Cc]ontroller lockup detected|[Kk]illing adapter|adapter reset failed|Reset failed, killing|diag reset: FAILED/;
const CTRL_RESET = /FW in FAULT state|fault_state\(0x[0-9a-fA-F]+\)|resetting fusion adapter/;
const CTRL_PCI = /\b(megaraid_sas|hpsa|mpt3sas|mpt2sas|smartpqi) ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): /;
const CTRL_IOC = /\b(mpt[23]sas_cm\d+): /;
// Before 4.x megaraid_sas named no device: "megasas: Found FW in FAULT state, will reset adapter.",
// "megaraid_sas: resetting fusion adapter.", "megaraid_sas: Reset failed, killing adapter.": a problem on no entity.
const CTRL_OLD = /\bmega(?:raid_)?sas: /;

const volumeStorage: KernelRule = {
  name: 'volume-storage',
  keywords: [
    'nfs: server',
    'switching pool to',
    'errs: wr',
    'csum failed',
    'lockup detected',
    'illing adapter',
    'eset failed',
    'FAULT state',
    'fault_state(',
    'diag reset: FAILED',
    'resetting fusion adapter',
  ],
  match(msg): RuleHit | null {
    if (msg.includes('nfs: server')) {
      const m = NFS.exec(msg.trimEnd());
      if (!m) return null;
      const ok = m[2] === 'OK';
      return {
        reason: 'NFSServerNotResponding',
        entity: `nfs:${m[1]}`,
        summary: ok ? `NFS server ${m[1]} answers again` : `NFS server ${m[1]} not responding`,
        attrs: { server: m[1] },
        ...(ok ? { clears: NFS_REASONS } : {}),
      };
    }
    if (msg.includes('switching pool to')) {
      const m = THIN.exec(msg);
      if (!m) return null;
      const entity = m[1] ? `dm:${m[1]}` : '';
      const attrs = { ...(m[1] ? { pool: m[1] } : {}), mode: m[2] };
      const pool = `thin pool${m[1] ? ` ${m[1]}` : ''}`;
      if (m[2] === 'write') return { reason: 'ThinPoolOutOfSpace', entity, summary: `${pool} writable again`, attrs, clears: THIN_REASONS };
      if (m[2] === 'out-of-data-space') return { reason: 'ThinPoolOutOfSpace', entity, summary: `${pool} out of data space`, attrs };
      return { reason: 'ThinPoolReadOnly', entity, summary: `${pool} switched to ${m[2]} mode`, attrs };
    }
    if (msg.includes('BTRFS')) {
      const e = BTRFS_ERRS.exec(msg);
      if (e) {
        const dev = e[2].replace(/^\/dev\/(?:mapper\/)?/, '');
        return {
          reason: 'BtrfsError',
          entity: `blockdev:${dev}`,
          summary: `btrfs error counters on ${dev}`,
          attrs: {
            device: dev,
            filesystem: e[1],
            write: Number(e[3]),
            read: Number(e[4]),
            flush: Number(e[5]),
            corrupt: Number(e[6]),
            generation: Number(e[7]),
          },
        };
      }
      const c = BTRFS_CSUM.exec(msg);
      if (c)
        return {
          reason: 'BtrfsError',
          entity: `blockdev:${c[1]}`,
          summary: `btrfs checksum failure on ${c[1]}`,
          attrs: { device: c[1], kind: 'csum' },
        };
      return null;
    }
    const failed = CTRL_FAILED.test(msg);
    if (!failed && !CTRL_RESET.test(msg)) return null;
    const p = CTRL_PCI.exec(msg);
    const ioc = p ? null : CTRL_IOC.exec(msg);
    if (!p && !ioc) {
      if (!CTRL_OLD.test(msg)) return null;
      const attrs = { driver: 'megaraid_sas' };
      return failed
        ? { reason: 'StorageControllerFailed', entity: '', summary: 'storage controller (megaraid_sas) failed', attrs }
        : { reason: 'StorageControllerReset', entity: '', summary: 'storage controller (megaraid_sas) firmware fault, reset', attrs };
    }
    const entity = p ? `pci:${p[2].toLowerCase()}` : `ioc:${ioc![1]}`;
    const driver = p ? p[1] : ioc![1].replace(/_cm\d+$/, '');
    const attrs = { driver, ...(p ? { device: p[2].toLowerCase() } : { ioc: ioc![1] }) };
    const where = entity.slice(entity.indexOf(':') + 1);
    return failed
      ? { reason: 'StorageControllerFailed', entity, summary: `storage controller ${where} (${driver}) failed`, attrs }
      : { reason: 'StorageControllerReset', entity, summary: `storage controller ${where} (${driver}) firmware fault, reset`, attrs };
  },
};

/** All built-in rules in priority order (first hit wins). */
export const BUILTIN_RULES: readonly KernelRule[] = [
  xid,
  fallenOff,
  initFailed,
  gspTimeout,
  gpuUnusable,
  sxid,
  ncclCrash,
  softLockup,
  hardLockup,
  rcuStall,
  appBlocked,
  appCrash,
  machineCheck,
  kernelBug,
  oomKill,
  cper,
  aer,
  aerHead,
  smmu,
  conntrack,
  blockIo,
  nvme,
  scsi,
  ext4,
  xfs,
  xfsError,
  readOnly,
  nicFault,
  volumeStorage,
];
