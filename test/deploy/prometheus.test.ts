/**
 * A real Prometheus (built from the Go module proxy) watching a real agent: it discovers the agent
 * through `kubernetes_sd_configs` on a real API server, scraped and labelled as the chart's
 * PodMonitor makes the Prometheus Operator do, with the chart's alert rules loaded (`for` 5 s).
 * The checks are checkChartMonitoring's (test/helpers/prometheus.ts): every dashboard query returns
 * a series, the idle agent's event-loop lag panel is under 50 ms, an Xid 79 in the real /dev/kmsg
 * fires VigilNodeConditionFailing after its `for`, and stopping the agent fires VigilAgentDown.
 *
 * Here the agent is a real `vigil run` listening on 127.0.0.1, and its Pod is an object created
 * through the API (admin): bound to a Node object, hostNetwork, status.podIP 127.0.0.1, its `http`
 * container port the agent's, so discovery finds it as it finds the DaemonSet's pod. The chart's
 * real pod on a real kubelet is covered by test/deploy/kubelet.test.ts.
 */
import { before, test } from 'node:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type * as k8s from '@kubernetes/client-node';
import { setHeaderOptions, PatchStrategy } from '@kubernetes/client-node';
import { kubeAgentArgs, startAgent } from '../helpers/agent-process.ts';
import { VIGIL_NAMESPACE, startCluster } from '../helpers/cluster.ts';
import { checkChartMonitoring, ensurePrometheus, startChartPrometheus } from '../helpers/prometheus.ts';
import { ensureTools, helmTemplate, only } from './tools.ts';

before(() => {
  ensureTools();
  ensurePrometheus();
});

const FOR_S = 5;

test(
  'a real Prometheus watching the agent: dashboard queries, lag panel, the condition and agent-down alerts',
  { timeout: 600_000 },
  async (t) => {
    const cluster = await startCluster();
    const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-prometheus-e2e-'));
    t.after(async () => {
      await cluster.stop();
      rmSync(dir, { recursive: true, force: true });
    });
    const node = 'prom-e2e';
    await cluster.createNode(node);
    const config = path.join(dir, 'vigil.yaml');
    // Every host check on (they feed the check panels); no GPU here; records already in the ring are not ours.
    writeFileSync(
      config,
      ['kernelLog:', '  lookback: "0"', 'gpu:', '  enabled: false', 'monitors:', '  scheduler: {startupJitter: 0}', ''].join('\n'),
    );
    const agent = await startAgent(kubeAgentArgs(cluster.vigilKubeconfig, node, path.join(dir, 'state'), config));
    t.after(() => agent.stop());

    // The DaemonSet's pod as the API server would hold it once a kubelet ran it on `node`.
    const ds = only<k8s.V1DaemonSet>(helmTemplate({}, { namespace: VIGIL_NAMESPACE }), 'DaemonSet');
    const container = ds.spec!.template.spec!.containers[0];
    const ports = (container.ports ?? []).map((p) => ({
      ...p,
      containerPort: agent.port,
      ...(p.hostPort ? { hostPort: agent.port } : {}),
    }));
    const pod = `vigil-${node}`;
    await cluster.admin.core.createNamespacedPod({
      namespace: VIGIL_NAMESPACE,
      body: {
        metadata: { name: pod, labels: ds.spec!.template.metadata!.labels! },
        spec: { nodeName: node, hostNetwork: true, containers: [{ name: container.name, image: container.image!, ports }] },
      },
    });
    await cluster.admin.core.patchNamespacedPodStatus(
      {
        name: pod,
        namespace: VIGIL_NAMESPACE,
        body: {
          status: {
            phase: 'Running',
            hostIP: '127.0.0.1',
            podIP: '127.0.0.1',
            podIPs: [{ ip: '127.0.0.1' }],
            conditions: [{ type: 'Ready', status: 'True' }],
          },
        },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );

    const prom = await startChartPrometheus({
      server: cluster.server,
      caFile: path.join(cluster.dir, 'pki', 'ca.crt'),
      tokenFile: path.join(cluster.dir, 'admin.token'),
      namespace: VIGIL_NAMESPACE,
      forSeconds: FOR_S,
    });
    t.after(() => prom.stop());

    await checkChartMonitoring(
      t,
      prom,
      {
        node,
        namespace: VIGIL_NAMESPACE,
        pod,
        container: container.name,
        instance: `127.0.0.1:${agent.port}`,
        async condition(type) {
          return (await cluster.readNode(node)).status?.conditions?.find((c) => c.type === type);
        },
        async stop() {
          await agent.stop();
        },
      },
      FOR_S,
    );
  },
);
