/**
 * Every stable error code (`VigilError.code`), like undici's `UND_ERR_*`. Codes are public API:
 * scripts and operators match on them instead of on message text, so a code is never renamed or
 * reused for another meaning. docs/errors.md is generated from this table (`npm run gen`), and
 * test/unit/error-codes.test.ts fails when a code disappears from catalog/error-codes-snapshot.json.
 */
export interface ErrorCodeInfo {
  /** What went wrong, one line. */
  meaning: string;
  /** Where a user or an operator sees it. */
  seen: string;
  /** What to do about it. */
  action: string;
}

export const ERROR_CODES = {
  VIGIL_E_CONFIG: {
    meaning: 'The configuration file is missing, unreadable, too large, not YAML, or has invalid fields (each named).',
    seen: '`vigil run`, `vigil check-config`: stderr, exit 2; `vigil diagnose` records it in the bundle.',
    action: 'Fix the fields named, then check the file with `vigil check-config FILE`.',
  },
  VIGIL_E_FILE_TOO_LARGE: {
    meaning: 'A configuration, user rule or NPD file is over the 128 KiB limit.',
    seen: 'Inside a `VIGIL_E_CONFIG` or `VIGIL_E_RULE_FILES` message.',
    action: 'Check the path names the intended file; split very large rule sets.',
  },
  VIGIL_E_FILE_UNREADABLE: {
    meaning: 'A configuration, user rule or NPD file cannot be opened or read (missing, a directory, no permission).',
    seen: 'Inside a `VIGIL_E_CONFIG` or `VIGIL_E_RULE_FILES` message.',
    action: 'Check the path and that the agent can read it (in the pod: the mounted ConfigMap).',
  },
  VIGIL_E_RULE_FILES: {
    meaning: 'One or more user rule files or NPD configuration files are invalid; every problem is listed.',
    seen: '`vigil run`, `vigil check-config`: stderr, exit 2.',
    action: 'Fix each file and rule named, then run `vigil check-config`.',
  },
  VIGIL_E_USER_RULE: {
    meaning: 'A user rule file is not valid YAML or a rule in it is invalid.',
    seen: 'One line of a `VIGIL_E_RULE_FILES` message.',
    action: 'Fix the rule and field named (docs/configuration.md).',
  },
  VIGIL_E_NPD_CONFIG: {
    meaning: 'A node-problem-detector configuration file is not valid JSON or has a field Vigil cannot use.',
    seen: 'One line of a `VIGIL_E_RULE_FILES` message.',
    action: 'Fix the field named; only `"plugin": "kmsg"` files load (rules for journald or a log file are refused).',
  },
  VIGIL_E_PATTERN: {
    meaning: 'A configured pattern is not RE2 syntax, uses an unsupported flag, or compiles too large.',
    seen: 'Inside configuration and user rule errors, naming the field.',
    action: 'Rewrite the pattern in RE2 syntax (no lookaround or backreferences), or split it into several rules.',
  },
  VIGIL_E_SCAN_NOT_TEXT: {
    meaning: 'The input given to `vigil scan` is not a text log (it holds NUL bytes).',
    seen: '`vigil scan`: stderr, exit 2.',
    action: 'Decompress or export the log as text first (e.g. `journalctl -k -o short-precise`).',
  },
  VIGIL_E_SCAN_INPUT: {
    meaning: 'The input given to `vigil scan` cannot be read as a stream (it is a directory).',
    seen: '`vigil scan`: stderr, exit 2.',
    action: 'Give a file, a FIFO or `-` for stdin.',
  },
  VIGIL_E_STATE_DIR_LOCKED: {
    meaning: 'Another Vigil agent holds the state directory.',
    seen: '`vigil run`: the "vigil cannot start" log line, exit 2.',
    action: 'Stop the other agent, or give this one its own `--state-dir`.',
  },
  VIGIL_E_STATE_DIR_LOCK_FAILED: {
    meaning: "The state directory's lock file cannot be locked (flock failed with an errno other than EWOULDBLOCK).",
    seen: '`vigil run`: the "vigil cannot start" log line, exit 2.',
    action: 'Put the state directory on a local file system that supports flock.',
  },
  VIGIL_E_BOOT_ID: {
    meaning: "The kernel's boot id (/proc/sys/kernel/random/boot_id) cannot be read or is empty.",
    seen: '`vigil run`: the "vigil cannot start" log line, exit 2.',
    action: 'Run the agent with /proc mounted; it needs the boot id to tell a reboot from a restart.',
  },
  VIGIL_E_KMSG_UNAVAILABLE: {
    meaning: 'The kernel log reader cannot start its wake-up descriptor (eventfd failed).',
    seen: '`/healthz` and the kernel-log monitor\'s "cannot start" message; its conditions go Unknown until it starts.',
    action: 'Check the process limits (open files); the agent retries with backoff.',
  },
  VIGIL_E_CHECK_TIMEOUT: {
    meaning: 'A polled check overran its time budget and was abandoned.',
    seen: 'The "overran its budget" log line and the `MonitorCheckTimeout` finding.',
    action: 'Look at what the check waits on (a hung tool or device); raise its timeout only when the node is merely slow.',
  },
  VIGIL_E_SYSTEMCTL: {
    meaning: '`systemctl show` timed out or exited non-zero while the runtime monitor read unit states.',
    seen: "The runtime monitor's check result and log.",
    action: "Check that the host's D-Bus system socket is mounted and systemd answers.",
  },
  VIGIL_E_NVML_CALL: {
    meaning: 'An NVML call returned an error code (named in the message, e.g. NVML_ERROR_GPU_IS_LOST).',
    seen: '`vigil gpu`, `/healthz`, and the GPU condition messages.',
    action: 'Act on the NVML code named: a lost GPU needs a reset or reboot; NOT_SUPPORTED is informational.',
  },
  VIGIL_E_NVML_LOAD: {
    meaning: 'The NVML library cannot be loaded or lacks a symbol Vigil needs.',
    seen: '`vigil gpu`, `/healthz` and the GPU condition messages ("NVML cannot be loaded").',
    action: 'Check the driver is installed and its libnvidia-ml.so.1 is visible to the agent.',
  },
  VIGIL_E_NVML_TIMEOUT: {
    meaning: 'An NVML call did not return within the watchdog budget; its worker thread was abandoned.',
    seen: "`vigil gpu`, the GPU monitor's log and metrics.",
    action: 'The driver is hung: look at the kernel log for Xid errors; the node may need a reboot.',
  },
  VIGIL_E_NVML_WORKER_GONE: {
    meaning: 'The NVML worker thread died or was stopped while a call was pending.',
    seen: "The GPU monitor's log; the monitor restarts the worker.",
    action: 'Usually follows a timeout or a stop; report it if it repeats without one.',
  },
  VIGIL_E_DCGM_CALL: {
    meaning: 'A DCGM call returned an error code (named in the message).',
    seen: "The GPU monitor's log when DCGM push health is on.",
    action: 'Check the DCGM host engine is running and reachable.',
  },
  VIGIL_E_DCGM_LOAD: {
    meaning: 'The DCGM library cannot be loaded or lacks a symbol Vigil needs.',
    seen: "The GPU monitor's log (with `gpu.source: auto`, Vigil uses NVML instead).",
    action: 'Install DCGM and make libdcgm.so.4 visible to the agent, or set `gpu.source` to `nvml`.',
  },
  VIGIL_E_DIAGNOSTICS_REQUEST: {
    meaning: 'A diagnostic capture request is invalid: an unknown category, a bad `since`, or a bad command override.',
    seen: '`vigil diagnose`: stderr, exit 2; the NodeDiagnostic status message.',
    action: 'Use the categories and duration format named in the message.',
  },
  VIGIL_E_DIAGNOSTICS_TOOL_MISSING: {
    meaning: 'A tool a diagnostic collector runs is not installed on the node or in the image.',
    seen: "The bundle's manifest.json (that collector failed) and `vigil diagnose` progress.",
    action: 'Install the tool named, or accept the bundle without that collector.',
  },
  VIGIL_E_UPLOAD_DESTINATION_REFUSED: {
    meaning:
      'The upload destination was refused by policy before anything was sent (not https, a private or API server address, unresolvable).',
    seen: 'The NodeDiagnostic status message.',
    action: 'Use an https destination on an allowed host (`diagnostics.upload.allowedHosts`).',
  },
  VIGIL_E_UPLOAD_REJECTED: {
    meaning: 'The upload destination answered with an HTTP status that retrying cannot fix (4xx other than 408 and 429).',
    seen: 'The NodeDiagnostic status message.',
    action: 'Check the destination URL and its credentials (a pre-signed URL may have expired).',
  },
  VIGIL_E_UPLOAD_RETRYABLE: {
    meaning: 'The upload destination answered 408, 429 or 5xx; the upload is retried.',
    seen: 'The NodeDiagnostic status message when every attempt failed.',
    action: "Check the destination's health; the capture is kept on the node meanwhile.",
  },
  VIGIL_E_DOWNLOAD_SIZE: {
    meaning: 'A bundle fetched through the API server is not the size the agent reported.',
    seen: '`kubectl vigil logs`: the result line for that node.',
    action: 'Fetch it again; the transfer was cut short.',
  },
} as const satisfies Record<`VIGIL_E_${string}`, ErrorCodeInfo>;

export type VigilErrorCode = keyof typeof ERROR_CODES;
