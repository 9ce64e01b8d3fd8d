/** `vigil run`: the agent's main job. */
import pino from 'pino';
import { loadConfig, type VigilConfig } from '../settings/index.ts';
import { kubeconfigProblem } from '../config/kubeconfig.ts';
import { nodeNameProblem } from '../config/node-name.ts';
import { Agent } from '../app/agent.ts';
import { buildMonitors } from '../app/build-monitors.ts';
import { loadRuleFiles } from '../monitors/kernel-log/rule-files.ts';
import { kubeConfigAvailable, resolveNodeName } from '../kube/detect.ts';
import type { KubernetesParts } from '../app/kubernetes.ts';
import { collectStartupGarbage } from '../util/startup-gc.ts';
import { messageWithCode } from '../util/errors.ts';
import { guardSignals, type SignalGuard } from './signals.ts';

const inspector = process.features.inspector ? (await import('node:inspector')).default : undefined;

export interface RunOptions {
  standalone?: boolean;
  listen?: string;
  stateDir?: string;
  config?: string;
  /** NPD system-log-monitor files (--npd-config, repeatable), added to kernelLog.npdConfigs. */
  npdConfig?: string[];
  nodeName?: string;
  kubeconfig?: string;
}

export async function runAgentCommand(opts: RunOptions): Promise<number> {
  // Files are read and checked before any handler exists: that work is synchronous (bounded by
  // the size caps, still seconds on a busy node, forever on a FIFO nobody writes), and a signal
  // with a handler would wait behind it. Nothing runs yet, so Node's default exit is right.
  const config = loadRunConfig(opts);
  if (typeof config === 'number') return config;
  // Then the handlers: a stop signal that arrives while the agent starts must still stop it cleanly,
  // state saved, once start returns (not kill it at Node's default). SIGHUP stops like SIGTERM; it
  // does not reload (configuration is read at start, so restart to apply it).
  const signals = guardSignals();
  try {
    // An inspector open on the node (--inspect in NODE_OPTIONS or node's arguments) runs code as
    // root for anyone who reaches its port; an agent never needs one.
    if (inspector?.url()) {
      process.stderr.write(
        "vigil run refuses to start with the Node inspector open (an --inspect flag in NODE_OPTIONS or node's arguments): " +
          'anyone who reaches its port could run code as root; remove the flag\n',
      );
      return 2;
    }
    return await runAgent(opts, config, signals);
  } finally {
    signals.remove();
  }
}

/** The configuration with its rule files checked, or the exit status once the error is printed. */
function loadRunConfig(opts: RunOptions): VigilConfig | number {
  let config: VigilConfig;
  try {
    config = loadConfig(opts.config);
    config.kernelLog.npdConfigs.push(...(opts.npdConfig ?? []));
    // A bad rule or NPD file (a journald plugin, a Go regex JS cannot run) is refused before start.
    loadRuleFiles(config.kernelLog);
  } catch (err) {
    process.stderr.write(`${messageWithCode(err)}\n`);
    return 2;
  }
  // Checked here, cheaply: the Kubernetes client accepts any file and fails later, far from the cause.
  const badKubeconfig = opts.kubeconfig ? kubeconfigProblem(opts.kubeconfig) : undefined;
  if (badKubeconfig) {
    process.stderr.write(`--kubeconfig ${opts.kubeconfig}: ${badKubeconfig}\n`);
    return 2;
  }
  // nodeName is checked by the schema; --node-name and $NODE_NAME here, before anything uses them.
  const [from, name] = opts.nodeName ? ['--node-name', opts.nodeName] : ['$NODE_NAME', config.nodeName ? '' : process.env.NODE_NAME];
  const badName = name ? nodeNameProblem(name) : undefined;
  if (badName) {
    process.stderr.write(`${from}: ${badName}\n`);
    return 2;
  }
  return config;
}

async function runAgent(opts: RunOptions, config: VigilConfig, signals: SignalGuard): Promise<number> {
  if (opts.listen) config.listen = opts.listen;
  if (opts.stateDir) config.stateDir = opts.stateDir;
  if (opts.kubeconfig) config.kubernetes.kubeconfig = opts.kubeconfig;
  const log = pino({ level: config.logLevel, base: { app: 'vigil' }, timestamp: pino.stdTimeFunctions.isoTime });
  signals.setLogger(log);
  const kubeconfig = config.kubernetes.kubeconfig;
  const useKube =
    !opts.standalone && config.kubernetes.mode !== 'off' && (config.kubernetes.mode === 'on' || kubeConfigAvailable(kubeconfig));
  const nodeName = resolveNodeName(opts.nodeName ?? config.nodeName);

  let kube: KubernetesParts | undefined;
  // The Kubernetes client is heavy to load; standalone runs never pay for it.
  const kubeModule = useKube ? await import('../app/kubernetes.ts') : undefined;
  let agent: Agent;
  try {
    agent = new Agent({
      config,
      log,
      monitors: (ctx) => buildMonitors(config, { ...ctx, log }),
      diagnosticBundle: (name, token) => diagnostics?.bundle(name, token),
      sinks: ({ registry, restored, markDirty }) => {
        if (!kubeModule) return [];
        kube = kubeModule.buildKubernetes(config, { nodeName, log, registry, restored, markDirty });
        return kube.entries;
      },
    });
  } catch (err) {
    log.error({ err }, `vigil cannot start: ${messageWithCode(err)}`);
    return 2;
  }

  // Diagnostic captures (NodeDiagnostic requests, automatic capture on Fatal), beside the flow;
  // listening to the engine before the monitors start, so a Fatal fault found at start counts.
  const { createDiagnostics } = await import('../diagnostics/node-diagnostic/index.ts');
  // Declared after the Agent, whose HTTP route reads it only once serving (after this line).
  const diagnostics = await createDiagnostics({
    config,
    ...(opts.config ? { configPath: opts.config } : {}),
    log,
    registry: agent.registry,
    nodeName,
    ...(kube ? { kube: { clients: kube.clients, events: kube.sink.events } } : {}),
  });
  if (diagnostics) agent.attach({ name: 'diagnostics', handle: (event) => diagnostics.handle(event) });
  let listen: { port: number; address: string };
  try {
    listen = await agent.start();
  } catch (err) {
    log.error({ err }, `vigil cannot start: ${messageWithCode(err)}`);
    await diagnostics?.close();
    await agent.stop();
    return 2;
  }
  log.info(
    { event: 'mode', standalone: !useKube, node: nodeName },
    useKube ? `reporting to Kubernetes as node ${nodeName}` : 'standalone: reporting through logs, /metrics and /conditions',
  );
  diagnostics?.start(listen);
  collectStartupGarbage(10_000);

  const signal = await signals.stopped;
  log.info({ event: 'stopping', signal }, 'vigil stopping');
  await diagnostics?.close();
  await agent.stop();
  // A thread stuck in a hung NVML call would keep the process alive forever; leave without it.
  const { nvmlThreadsLeft, exitNow } = await import('../sources/nvml/client.ts');
  if (nvmlThreadsLeft() > 0) {
    log.warn({ event: 'stopping', threads: nvmlThreadsLeft() }, 'NVML calls still hung; exiting without waiting for them');
    log.flush?.();
    exitNow(0);
  }
  return 0;
}
