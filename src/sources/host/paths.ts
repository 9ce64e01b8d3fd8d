/** Host paths: the DaemonSet mounts the host's / at a path (e.g. /host); checks name host paths. */
import path from 'node:path';

/** `p` as seen under `root`; `..` cannot climb out of the root. */
export function hostPath(root: string, p: string): string {
  const abs = path.posix.resolve('/', p);
  return !root || root === '/' ? abs : path.posix.join(root, abs);
}
