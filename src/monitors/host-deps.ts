/** Seams of the polled checks for tests: replace syscalls, spawning, DNS and statfs. */
import type { ExecFn } from '../sources/host/exec.ts';
import type { KernelSyscalls } from './kernel/read.ts';
import type { LookupFn } from './networking/read.ts';
import type { StatfsFn } from './storage/read.ts';

export interface HostDeps {
  kernel: KernelSyscalls;
  exec: ExecFn;
  lookup: LookupFn;
  statfs: StatfsFn;
  env: NodeJS.ProcessEnv;
}
