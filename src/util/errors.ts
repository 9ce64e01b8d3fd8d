/** What was thrown, as text: `throw` can carry anything, so never cast it to Error. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);
}

/** The errno code of a failed system call (`ENOENT`, `EACCES`...), if there is one. */
export function errorCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string') return err.code;
  return undefined;
}
