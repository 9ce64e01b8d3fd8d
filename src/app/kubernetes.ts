/**
 * The Kubernetes side of `vigil run`, built once from configuration: one client set for the
 * condition and Event sink and the opt-in quarantine (cordon and taint) beside it. Loaded only
 * when the agent reports to Kubernetes: the client library is heavy.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { NodeHealth } from '../api/types.ts';
import type { VigilConfig } from '../settings/index.ts';
import { makeClients, type KubeClients } from '../kube/client.ts';
import { Quarantine } from '../remediation/quarantine.ts';
import { KubernetesSink, type KubernetesSinkOptions } from '../sinks/kubernetes/sink.ts';
import type { PersistedState } from '../state/store.ts';
import type { SinkEntry } from './agent.ts';

export interface KubernetesParts {
  /** One client set, shared with diagnostics. */
  clients: KubeClients;
  sink: KubernetesSink;
  quarantine: Quarantine | undefined;
  /** For the Agent: the sink (adopting the Node's conditions) and the quarantine. */
  entries: SinkEntry[];
}

export function buildKubernetes(
  config: VigilConfig,
  o: {
    nodeName: string;
    log: Logger;
    registry: Registry;
    restored: PersistedState | undefined;
    markDirty: () => void;
    /** Default: made from config.kubernetes.kubeconfig. */
    clients?: KubeClients;
    /** The sink's settings that are not configuration (tests and benches: shorter retries, a mocked clock). */
    tuning?: Partial<Omit<KubernetesSinkOptions, 'clients' | 'nodeName' | 'log' | 'registry'>>;
  },
): KubernetesParts {
  const { nodeName, log, registry } = o;
  const k = config.kubernetes;
  // The agent's identity is kept applied (a fault's Event is built in the turn that found it), and
  // an Event create kept ready on its own connection (it is written in that turn, too).
  const clients = o.clients ?? makeClients(k.kubeconfig, {}, { keepIdentityFresh: true, readyEventCreate: true });
  const sink = new KubernetesSink({
    clients,
    nodeName,
    log,
    registry,
    heartbeatMs: k.heartbeat,
    coalesceMs: k.coalesce,
    eventNamespace: k.eventNamespace,
    eventsPerReasonPerMinute: k.eventsPerReasonPerMinute,
    fatalEventsPerReasonPerMinute: k.fatalEventsPerReasonPerMinute,
    ...(o.restored?.kubernetes ? { writtenTypes: o.restored.kubernetes.writtenTypes } : {}),
    onWrittenTypes: () => o.markDirty(),
    ...o.tuning,
  });
  // Optional quarantine (off by default): beside the flow, fed the same condition changes.
  const q = config.quarantine;
  const quarantine = q.enabled
    ? new Quarantine({
        clients,
        nodeName,
        log,
        registry,
        dryRun: q.dryRun,
        maxQuarantinedShare: q.maxQuarantinedShare,
        jitterMs: q.jitter,
        recheckMs: q.recheck,
        eventNamespace: k.eventNamespace,
      })
    : undefined;
  return {
    clients,
    sink,
    quarantine,
    entries: [
      { sink, adopts: sink, persist: (state) => (state.kubernetes = { writtenTypes: sink.conditions.writtenTypes }) },
      ...(quarantine ? [{ sink: quarantine, start: (health: NodeHealth) => quarantine.start(health) }] : []),
    ],
  };
}
