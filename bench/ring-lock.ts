/**
 * The kernel ring is shared by every bench and test on the machine: a bench that floods /dev/kmsg
 * (a storm, a throughput ladder) holds /tmp/vigil-ring.lock exclusively so nothing else's records
 * fall into its window and its own storm spoils no one else's measurement.
 */
import { spawn } from 'node:child_process';

/** Holds /tmp/vigil-ring.lock (flock -x) until release(). */
export async function ringLock(): Promise<{ release(): Promise<void> }> {
  const child = spawn('flock', ['-x', '/tmp/vigil-ring.lock', '-c', 'echo locked; cat >/dev/null'], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`flock exited with ${code}`)));
  });
  return {
    async release() {
      const done = new Promise((r) => child.once('exit', r));
      child.stdin.end();
      await done;
    },
  };
}
