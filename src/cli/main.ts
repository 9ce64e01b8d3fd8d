/**
 * The `vigil` command line. Each command lives in its own module and is imported only when used,
 * so `vigil --help` and `vigil scan` stay fast and do not load koffi or the Kubernetes client.
 */
import { Command, CommanderError, Option } from 'commander';

/** Exit status 2 is for bad input or arguments, everywhere. */
export const EXIT_USAGE = 2;

export function buildProgram(): Command {
  const program = new Command('vigil')
    .description('Node-health agent for Kubernetes GPU fleets: kernel log, NVML and host checks to NodeConditions and Events.')
    .version('0.1.0')
    .exitOverride()
    .configureOutput({ outputError: (s, write) => write(s) });

  program
    .command('run')
    .description('run the agent (standalone when no kubeconfig or in-cluster config is found, or with --standalone)')
    .option('--standalone', 'do not talk to Kubernetes; report through logs, /metrics and /conditions only')
    .option('--listen <host:port>', 'address for /metrics, /healthz and /conditions (default from config: 127.0.0.1:9464)')
    .option('--state-dir <dir>', 'where state survives restarts (default from config: /var/lib/vigil)')
    .option('--config <file>', 'YAML configuration file (see docs/configuration.md)')
    .option('--node-name <name>', "this node's name (default: $NODE_NAME, then the host name)")
    .option('--kubeconfig <file>', 'kubeconfig to use instead of in-cluster configuration')
    .action(async (opts) => {
      const { runAgentCommand } = await import('./run-command.ts');
      process.exitCode = await runAgentCommand(opts);
    });

  program
    .command('scan')
    .description('classify a log file offline; prints one JSON object per finding with --json')
    .argument('<file>', 'log file (raw kmsg records, dmesg, syslog or plain lines); - for stdin')
    .addOption(new Option('--format <format>', 'input format').choices(['auto', 'kmsg', 'dmesg', 'syslog', 'plain']).default('auto'))
    .option('--json', 'one JSON object per line: {line, reason, severity, condition, message, entity}')
    .option('--config <file>', 'configuration (Xid lists, user rules, NPD files)')
    .action(async (file: string, opts) => {
      const { runScanCommand } = await import('./scan-command.ts');
      process.exitCode = await runScanCommand(file, opts);
    });

  program
    .command('catalog')
    .description('list every reason code with its condition, severity and recovery')
    .option('--json', 'machine-readable output')
    .action(async (opts) => {
      const { runCatalogCommand } = await import('./catalog-command.ts');
      process.exitCode = runCatalogCommand(opts);
    });

  program
    .command('check-config')
    .description('validate a configuration file, including its rule files; exit 2 with each bad field named')
    .argument('<file>')
    .action(async (file: string) => {
      const { runCheckConfigCommand } = await import('./check-config-command.ts');
      process.exitCode = await runCheckConfigCommand(file);
    });

  program
    .command('gpu')
    .description("print the NVIDIA GPU inventory and every NVML check's current result")
    .option('--json', 'machine-readable output')
    .option('--library <path>', 'NVML library to load (default libnvidia-ml.so.1)')
    .option('--sys-root <dir>', 'sysfs root (default /sys)')
    .action(async (opts) => {
      const { runGpuCommand } = await import('./gpu-command.ts');
      process.exitCode = await runGpuCommand({ json: Boolean(opts.json), library: opts.library, sysRoot: opts.sysRoot });
    });

  return program;
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
    process.stderr.write(`vigil: ${(err as Error).message}\n`);
    process.exitCode = EXIT_USAGE;
  }
}
