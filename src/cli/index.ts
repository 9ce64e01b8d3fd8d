/** The `vigil` commands. main.ts parses the command line; the commands load on demand. */
export { EXIT_USAGE, buildProgram, main } from './main.ts';
export { runGpuCommand } from './gpu-command.ts';
export type { GpuCommandOptions, GpuCommandReport } from './gpu-command.ts';
export type { NodeConditionStatus, NodeStatus } from './status-command.ts';
