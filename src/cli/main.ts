/**
 * The `vigil` command line. Each command lives in its own module and is imported only when used,
 * so `vigil --help` and `vigil scan` stay fast and do not load koffi or the Kubernetes client.
 */
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { LISTEN_FORMAT, parseListen } from '../config/listen.ts';
import { VERSION } from '../util/version.ts';
import type { StatusOptions } from './status-command.ts';
import type { ScanOptions } from './scan-command.ts';
import type { RunOptions } from './run-command.ts';
import type { LogsOptions } from './logs-command.ts';
import type { DiagnoseOptions } from './diagnose-command.ts';
import { messageWithCode } from '../util/errors.ts';

/** Exit status 2 is for bad input or arguments, everywhere. */
export const EXIT_USAGE = 2;

export function buildProgram(): Command {
  const program = new Command('vigil')
    .description('Node-health agent for Kubernetes GPU fleets: kernel log, NVML and host checks to NodeConditions and Events.')
    .version(VERSION)
    .exitOverride()
    .configureOutput({ outputError: (s, write) => write(s) });

  program
    .command('run')
    .description('run the agent (standalone when no kubeconfig or in-cluster config is found, or with --standalone)')
    .option('--standalone', 'do not talk to Kubernetes; report through logs, /metrics and /conditions only')
    .option('--listen <host:port>', 'address for /metrics, /healthz and /conditions (default from config: 127.0.0.1:9464)', listenArg)
    .option('--state-dir <dir>', 'where state survives restarts (default from config: /var/lib/vigil)', nonEmptyArg)
    .option('--config <file>', 'YAML configuration file (see docs/configuration.md)')
    .option('--npd-config <file>', 'node-problem-detector kernel-monitor JSON file (repeatable; adds to kernelLog.npdConfigs)', collect, [])
    .option('--node-name <name>', "this node's name (default: $NODE_NAME, then the host name)")
    .option('--kubeconfig <file>', 'kubeconfig to use instead of in-cluster configuration')
    .action(async (opts: RunOptions) => {
      const { runAgentCommand } = await import('./run-command.ts');
      process.exitCode = await runAgentCommand(opts);
    });

  program
    .command('scan')
    .description("replay a saved log through the agent's pipeline and engine, timed by the log's own timestamps")
    .argument('<file>', 'log (raw kmsg records, dmesg, syslog or plain lines, mixed too): a file, a FIFO, <(zcat x.gz); - for stdin')
    .addOption(new Option('--format <format>', 'input format').choices(['auto', 'kmsg', 'dmesg', 'syslog', 'plain']).default('auto'))
    .option('--json', 'one JSON object per line: {line, reason, severity, condition, message, entity}')
    .option('--config <file>', 'configuration (Xid lists, user rules, NPD files)')
    .option('--npd-config <file>', 'node-problem-detector kernel-monitor JSON file (repeatable)', collect, [])
    .action(async (file: string, opts: ScanOptions) => {
      const { runScanCommand } = await import('./scan-command.ts');
      process.exitCode = await runScanCommand(file, opts);
    });

  program
    .command('catalog')
    .description('list every reason code with its condition, severity and recovery')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      const { runCatalogCommand } = await import('./catalog-command.ts');
      process.exitCode = runCatalogCommand(opts);
    });

  program
    .command('check-config')
    .description('validate a configuration file, including its rule files; exit 2 with each bad field named')
    .argument('<file>')
    .action(async (file: string) => {
      const { runCheckConfigCommand } = await import('./check-config-command.ts');
      process.exitCode = runCheckConfigCommand(file);
    });

  program
    .command('status')
    .description(
      "one row per node: the age of its agent's last heartbeat (STALE when the agent stopped writing), each Vigil condition, its reason, how long it has failed, pending repair or quarantine",
    )
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, then ~/.kube/config)')
    .option('-l, --selector <selector>', 'only nodes matching this label selector')
    .option('--json', 'one JSON array per refresh')
    .option('-w, --watch', 'keep refreshing (redrawn on a terminal; a new table on each change when piped)')
    .option('--interval <seconds>', 'refresh interval with --watch', '5')
    .option('--types <list>', 'condition types to show, comma-separated (when renamed with conditions.names)')
    .option('--context <name>', 'the kubeconfig context to use (as kubectl --context)')
    .option('-s, --server <url>', "the API server address, instead of the context cluster's (as kubectl --server)")
    .option(
      '--heartbeat-interval <duration>',
      "the agents' kubernetes.heartbeat: a node whose last heartbeat is older than twice this is marked STALE (0: never)",
      '5m',
    )
    .action(async (opts: StatusOptions) => {
      const { runStatusCommand } = await import('./status-command.ts');
      process.exitCode = await runStatusCommand(opts);
    });

  program
    .command('logs')
    .description(
      'collect diagnostic bundles from nodes through the API server (NodeDiagnostic): download them into --output, or PUT them to --upload-url; then clean up',
    )
    .argument('[nodes...]', 'node names (and/or --selector)')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, then ~/.kube/config)')
    .option('-l, --selector <selector>', 'also every node matching this label selector')
    .option('-o, --output <dir>', 'where bundles kept on the nodes are downloaded', '.')
    .option(
      '--upload-url <url>',
      'PUT the bundle to this URL instead of keeping it on the node: NODE=URL for one node, or a URL for the others ({node} is replaced); repeatable',
      collect,
      [],
    )
    .option('--categories <list>', 'comma-separated: kernel, gpu, vigil, network, storage, runtime, system (default: all)')
    .option('--since <duration>', 'journal span for the runtime category, e.g. 2h')
    .option('--timeout <duration>', 'give up waiting after this long', '15m')
    .option(
      '--bundle <name>',
      'download this bundle already kept on the node (e.g. an automatic capture, named in its Event) instead of capturing',
    )
    .action(async (nodes: string[], opts: LogsOptions) => {
      const { runLogsCommand } = await import('./logs-command.ts');
      process.exitCode = await runLogsCommand(nodes, opts);
    });

  program
    .command('gpu')
    .description("print the NVIDIA GPU inventory and every NVML check's current result")
    .option('--json', 'machine-readable output')
    .option('--library <path>', 'NVML library to load (default libnvidia-ml.so.1)')
    .option('--sys-root <dir>', 'sysfs root (default /sys)')
    .action(async (opts: { json?: boolean; library?: string; sysRoot?: string }) => {
      const { runGpuCommand } = await import('./gpu-command.ts');
      process.exitCode = await runGpuCommand({ json: Boolean(opts.json), library: opts.library, sysRoot: opts.sysRoot });
    });

  program
    .command('diagnose')
    .description('write a diagnostic bundle (.tar.gz with manifest.json), collected in a low-priority child process, secrets redacted')
    .option('--categories <list>', 'comma-separated: kernel,gpu,vigil,network,storage,runtime,system (default: all)')
    .option('--output <file>', 'bundle to write (default: vigil-diagnose-<node>-<time>.tar.gz)')
    .option('--config <file>', "the agent's configuration (state dir, host root, listen address; included redacted)")
    .option('--state-dir <dir>', "the agent's state directory (default from config: /var/lib/vigil)")
    .option('--node-name <name>', "this node's name (default: the config's nodeName, $NODE_NAME, then the host name)")
    .option('--since <duration>', 'kubelet and containerd journal span (default 2h)')
    .option('--timeout <duration>', 'bound on the whole capture (default 10m)')
    .option('--collector-timeout <duration>', 'bound on each collector (default 30s)')
    .option('--max-size <size>', 'total size cap of collected files, e.g. 256M (default)')
    .option('--collector-max-size <size>', "one collector's size cap (default 32M)")
    .option('--include-file <path>', 'another configuration file or directory to include, redacted (repeatable)', collect, [])
    .option('--host-root <dir>', "where the host's / is mounted (default from config: /)")
    .option('--json', 'print the bundle path and manifest as JSON')
    .option('-q, --quiet', 'no progress lines on stderr')
    .action(async (opts: DiagnoseOptions) => {
      const { runDiagnoseCommand } = await import('./diagnose-command.ts');
      process.exitCode = await runDiagnoseCommand(opts);
    });

  return program;
}

/** Refuses a --listen value `run` could not bind, before anything starts (commander names the flag). */
function listenArg(value: string): string {
  if (!parseListen(value)) throw new InvalidArgumentError(LISTEN_FORMAT);
  return value;
}

function nonEmptyArg(value: string): string {
  if (!value) throw new InvalidArgumentError('must not be empty');
  return value;
}

/** Commander's way to take a repeatable option as a list. */
function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export async function main(argv: string[]): Promise<void> {
  // `vigil catalog | head` closes stdout early; that is not an error.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0);
    throw err;
  });
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version exit 0; every usage error exits 2.
      process.exitCode = err.exitCode === 0 ? 0 : EXIT_USAGE;
      return;
    }
    process.stderr.write(`vigil: ${messageWithCode(err)}\n`);
    process.exitCode = EXIT_USAGE;
  }
}
