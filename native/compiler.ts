/**
 * The C compiler for the test doubles (fake NVML, fake DCGM): they are loaded into this Node
 * process through koffi, so they must be built for the architecture this Node runs on. On an amd64
 * machine running the arm64 Node under qemu's user mode (scripts/test-arm64.sh), qemu reports
 * aarch64 to the emulated process, so the choice is made by process.arch: arm64 with the cross
 * compiler aarch64-linux-gnu-gcc installed builds with it (an x86-64 program, which the kernel runs
 * natively even when spawned from the emulated process); otherwise gcc, which builds for the machine.
 */
import { spawnSync } from 'node:child_process';

let chosen: string | undefined;

/** The compiler command for process.arch, and the architecture that belongs in a cache key. */
export function compilerFor(): { cc: string; arch: string } {
  if (chosen === undefined) {
    chosen = 'gcc';
    if (process.arch === 'arm64' && spawnSync('sh', ['-c', 'command -v aarch64-linux-gnu-gcc']).status === 0) chosen = 'aarch64-linux-gnu-gcc';
  }
  return { cc: chosen, arch: process.arch };
}
