/** What was thrown, as text: `throw` can carry anything, so never cast it to Error. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return typeof err === 'string' ? err : (JSON.stringify(err) ?? String(err));
}

/** The errno code of a failed system call (`ENOENT`, `EACCES`...), if there is one. */
export function errorCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string') return err.code;
  return undefined;
}

/** What was thrown, as an Error: itself when it is one, else an Error carrying its text (and it as the cause). */
export function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(errorMessage(err), { cause: err });
}

/** Why a signal was aborted, as an Error: its reason when that is one (a bare abort() gives an AbortError DOMException, which is). */
export function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error(errorMessage(reason), { cause: reason });
}
