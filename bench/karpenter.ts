/**
 * The self-healing loop timed end to end on real parts (test/helpers/karpenter.ts runSelfHealing): a test control
 * plane, Karpenter v1.15's node repair (karpenter-vigil, NodeRepair=true) with the KWOK controller, one static-pool
 * kwok node with a real Vigil agent, and a fatal Xid 79 written to the real /dev/kmsg. Times are from the write
 * (Date.now()) to the API-server watch event.
 *
 * fault_to_nodeclaim_deleted_ms: until the NodeClaim is marked for deletion, minus the repair toleration
 *   (AcceleratedHardwareReady=False, scaled by BENCH_KARPENTER_TOLERATION_SCALE, default 1/30 = 20 s): what the loop
 *   adds on top of the toleration: Vigil's detection and write, the second precision of lastTransitionTime, Karpenter's
 *   disruption polling (10 s), and v1.15's replace-first repair, which launches the replacement and waits for it to
 *   initialize before it deletes.
 * fault_to_replacement_node_ms: until the replacement NodeClaim's Node is Ready (the toleration included).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg, kubeAgentArgs } from '../test/helpers/agent-process.ts';
import { startCluster } from '../test/helpers/cluster.ts';
import { runSelfHealing, startKarpenter, watchRepair } from '../test/helpers/karpenter.ts';

const SCALE = Number(process.env.BENCH_KARPENTER_TOLERATION_SCALE ?? 1 / 30);

export async function benchKarpenter(): Promise<Record<string, number>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-bench-karpenter-'));
  const cluster = await startCluster();
  try {
    const karpenter = await startKarpenter(cluster, { tolerationScale: SCALE });
    const watches = await watchRepair(cluster);
    try {
      const config = path.join(dir, 'vigil.yaml');
      writeFileSync(config, kernelLogOnlyConfig(['kubernetes:', '  mode: "on"', '  heartbeat: 5m', '  coalesce: 100ms']));
      const s = await runSelfHealing({
        cluster,
        karpenter,
        watches,
        pool: 'bench',
        dir,
        pci: uniquePci(),
        startAgent: (node) => startAgent(kubeAgentArgs(cluster.vigilKubeconfig, node, path.join(dir, 'state'), config)),
        writeFault: (pci) => writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=4242, name=bench, GPU has fallen off the bus.`, 4),
      });
      return {
        fault_to_nodeclaim_deleted_ms: s.at.nodeClaimDeleted - s.at.fault - s.tolerationMs,
        fault_to_replacement_node_ms: s.at.replacementNodeReady - s.at.fault,
        karpenter_repair_toleration_ms: s.tolerationMs,
      };
    } finally {
      watches.stop();
      await karpenter.stop();
    }
  } finally {
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
