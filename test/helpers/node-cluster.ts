/**
 * A control plane with one real Node (`test/cluster/up.sh --with-node`): kubelet, containerd and runc,
 * kube-scheduler, kube-controller-manager, and a local registry that containerd pulls from over plain
 * HTTP (also standing in for ghcr.io). Only one such cluster runs on a host at a time: up.sh waits
 * for the host lock. Torn down (host settings put back) by stop() and, should the test die, at exit.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { downOnExit, run as runScript } from './cluster.ts';
import { KUBECTL, ROOT, ok, run, versionsVar, type Run } from '../deploy/tools.ts';

const SCRIPTS = path.join(ROOT, 'test/cluster');
/** go-containerregistry's crane (test/cluster/build-node.sh): pushes image tarballs to the local registry. */
export const CRANE = versionsVar('CRANE_BIN');
/** The node's sandbox image as a docker-archive tarball (built by test/cluster/build-node.sh). */
export const PAUSE_TAR = versionsVar('PAUSE_TAR');

/** cluster.json as up.sh --with-node writes it (the fields used here). */
interface NodeClusterJson {
  dir: string;
  server: string;
  caFile: string;
  kubeconfig: string;
  adminToken: string;
  node: { name: string; ip: string };
  registry: string;
  containerdSocket: string;
  kubeletPort: number;
}

export interface NodeCluster {
  dir: string;
  server: string;
  adminKubeconfig: string;
  adminToken: string;
  caFile: string;
  nodeName: string;
  nodeIp: string;
  /** host:port of the local registry; containerd pulls `<registry>/...` and `ghcr.io/...` from it. */
  registry: string;
  containerdSocket: string;
  kubeletPort: number;
  /**
   * Pushes an image tarball (docker-archive, as `podman save` writes it) to the local registry as
   * `repoTag` (e.g. `vigil-dev/vigil:1.2.3`, then pullable as `ghcr.io/vigil-dev/vigil:1.2.3` too)
   * and returns `<registry>/<repoTag>`.
   */
  push(tarball: string, repoTag: string): string;
  /** The built kubectl with the admin kubeconfig. */
  kubectl(args: string[], opts?: { input?: string }): Run;
  /** down.sh --purge: stops everything and puts the host back as up.sh found it. */
  stop(): Promise<void>;
}

const NODE_LOCK = '/run/vigil-node.lock';

/**
 * Takes the host's node lock (waiting for any other node cluster to finish) and holds it until the
 * returned function is called or this process exits: for a test that looks at the host before up.sh
 * and after down.sh with no other node in between. Pass `{ lockHeld: true }` to startNodeCluster then.
 */
export function holdNodeLock(timeoutS = 900): Promise<() => void> {
  // The holder watches this process, so the lock is not kept by an orphan if the test dies.
  const holder = spawn(
    'flock',
    ['-w', String(timeoutS), NODE_LOCK, 'sh', '-c', `echo locked; while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done`],
    // Its own process group: releasing kills flock and the shell that inherited the lock.
    { stdio: ['ignore', 'pipe', 'inherit'], detached: true },
  );
  return new Promise((resolve, reject) => {
    holder.stdout.once('data', () => {
      holder.stdout.destroy();
      // Before the caller's first look at the host: what a node cluster killed without down.sh left goes.
      const stale = spawnSync('bash', [path.join(SCRIPTS, 'down.sh'), '--stale'], { encoding: 'utf8' });
      if (stale.status !== 0) process.stderr.write(`down.sh --stale: ${stale.stderr}`);
      resolve(() => {
        if (holder.pid !== undefined && holder.exitCode === null) process.kill(-holder.pid, 'SIGKILL');
      });
    });
    holder.once('exit', (code) => reject(new Error(`could not take ${NODE_LOCK} within ${timeoutS} s (flock exited ${code})`)));
  });
}

export async function startNodeCluster(opts: { lockHeld?: boolean } = {}): Promise<NodeCluster> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'vigil-node-'));
  const forget = downOnExit(dir);
  const down = () => runScript('bash', [path.join(SCRIPTS, 'down.sh'), '--purge', dir]);
  try {
    await runScript('bash', [path.join(SCRIPTS, 'up.sh'), '--with-node', dir], opts.lockHeld ? { VIGIL_NODE_LOCK_HELD: '1' } : {});
  } catch (err) {
    // up.sh undoes what it started; down.sh also releases the host if it got that far.
    spawnSync('bash', [path.join(SCRIPTS, 'down.sh'), '--purge', dir], { stdio: 'ignore' });
    forget();
    throw err;
  }
  const info = JSON.parse(readFileSync(path.join(dir, 'cluster.json'), 'utf8')) as NodeClusterJson;
  let stopped = false;
  return {
    dir,
    server: info.server,
    adminKubeconfig: info.kubeconfig,
    adminToken: info.adminToken,
    caFile: info.caFile,
    nodeName: info.node.name,
    nodeIp: info.node.ip,
    registry: info.registry,
    containerdSocket: info.containerdSocket,
    kubeletPort: info.kubeletPort,
    push(tarball, repoTag) {
      const ref = `${info.registry}/${repoTag}`;
      ok(run(CRANE, ['push', '--insecure', tarball, ref]), `crane push ${ref}`);
      return ref;
    },
    kubectl: (args, opts = {}) => run(KUBECTL, ['--kubeconfig', info.kubeconfig, ...args], opts),
    async stop() {
      if (stopped) return;
      stopped = true;
      await down();
      forget();
    },
  };
}
