import type { VigilErrorCode } from './error-codes.ts';

/**
 * An error a user or an operator can see, with a stable code (src/util/error-codes.ts,
 * docs/errors.md). Its name stays "Error" unless a subclass sets one, so printed errors read as before.
 */
export class VigilError extends Error {
  constructor(
    readonly code: VigilErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * The message for a person, with the code at the end of its first line when there is one
 * ("f.yaml: invalid configuration (VIGIL_E_CONFIG):" when that line introduces a list).
 */
export function messageWithCode(err: unknown): string {
  const message = errorMessage(err);
  if (!(err instanceof VigilError)) return message;
  const nl = message.indexOf('\n');
  const first = nl < 0 ? message : message.slice(0, nl);
  const rest = nl < 0 ? '' : message.slice(nl);
  return first.endsWith(':') ? `${first.slice(0, -1)} (${err.code}):${rest}` : `${first} (${err.code})${rest}`;
}

/** What was thrown, as text: `throw` can carry anything, so never cast it to Error. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return typeof err === 'string' ? err : (JSON.stringify(err) ?? String(err));
}

/** The errno code of a failed system call (`ENOENT`, `EACCES`...), if there is one. */
export function errorCode(err: unknown): string | undefined {
  // A VigilError's code is Vigil's own, never an errno.
  if (err instanceof VigilError) return undefined;
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
