export { hostPath } from './paths.ts';
export { readFileSmall, readProcFile, readSysFile, readSysFileAsync, readNumber, listDir, exists, readLinkBase } from './read.ts';
export { statfs, type StatFsSample } from './statfs.ts';
export { execBounded, type ExecFn, type ExecOptions, type ExecResult } from './exec.ts';
export { scanProcesses, type ProcSample } from './procs.ts';
