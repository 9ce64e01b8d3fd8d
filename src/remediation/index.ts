/** Remediation: the opt-in quarantine (cordon and taint) on Fatal conditions. */
export { CORDONED_BY_VIGIL_ANNOTATION, QUARANTINED_LABEL, QUARANTINE_TAINT_KEY, Quarantine, allowedQuarantined } from './quarantine.ts';
export type { QuarantineOptions } from './quarantine.ts';
