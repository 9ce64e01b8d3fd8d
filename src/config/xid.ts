/** The Xid policy's settings: one list schema for `xid.fatal`, `xid.ignore` and the GPU monitor. */
import * as z from 'zod';
import { XID_POLICY } from '../catalog/index.ts';

/** The default of `xid.fatal`: the catalog's (catalog/reasons.yaml `xidPolicy.fatal`, the EKS agent's list without 63). */
export const DEFAULT_FATAL_XIDS: readonly number[] = XID_POLICY.fatal;

/** A list of Xid numbers. */
export const xidList = z.array(z.number().int().min(1).max(1000));

export const xidConfig = z.strictObject({
  /** Xids that raise NvidiaXID<N>Error (Fatal); every other Xid raises NvidiaXID<N>Warning. */
  fatal: xidList.default([...DEFAULT_FATAL_XIDS]),
  /** Xids that are not reported at all (counted in vigil_findings_suppressed_total{why="ignored_xid"}). */
  ignore: xidList.default([]),
});
