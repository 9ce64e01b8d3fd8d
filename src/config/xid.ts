/** The Xid policy's settings: one list schema for `xid.fatal`, `xid.ignore` and the GPU monitor. */
import * as z from 'zod';

/** The EKS fatal Xid list without 63 (NVIDIA classes row-remap events as IGNORE; NVML judges them). */
export const DEFAULT_FATAL_XIDS: readonly number[] = [
  46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158,
];

/** A list of Xid numbers. */
export const xidList = z.array(z.number().int().min(1).max(1000));

export const xidConfig = z.strictObject({
  /** Xids that raise NvidiaXID<N>Error (Fatal); every other Xid raises NvidiaXID<N>Warning. */
  fatal: xidList.default([...DEFAULT_FATAL_XIDS]),
  /** Xids that are not reported at all (counted in vigil_findings_suppressed_total{why="ignored_xid"}). */
  ignore: xidList.default([]),
});
