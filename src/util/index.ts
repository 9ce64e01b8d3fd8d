/** Small helpers that import nothing from the rest of Vigil. */
export { Backoff } from './backoff.ts';
export { BOOT_ID_FILE, readBootId } from './boot-id.ts';
export { MAX_TIMER_MS, formatDuration, parseDuration, timerLimitProblem } from './duration.ts';
export { ERROR_CODES, type ErrorCodeInfo, type VigilErrorCode } from './error-codes.ts';
export { VigilError, abortReason, errorCode, errorMessage, messageWithCode, toError } from './errors.ts';
export { makeDirs } from './make-dirs.ts';
export { collectStartupGarbage } from './startup-gc.ts';
export { summarizeCounts } from './summarize.ts';
export { VERSION } from './version.ts';
