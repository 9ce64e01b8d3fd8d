/**
 * Counts reported in bursts (records lost or shed, batch by batch, during a storm) logged at most
 * once per `everyMs`: the first report at once, what follows within the window summed into one
 * line at its end. A storm then costs a few log lines, not one per batch.
 */
export function summarizeCounts(log: (n: number, total: number) => void, everyMs = 10_000): (n: number, total: number) => void {
  let pending = 0;
  let total = 0;
  let timer: NodeJS.Timeout | undefined;
  const flush = (): void => {
    timer = undefined;
    if (pending === 0) return;
    log(pending, total);
    pending = 0;
    timer = setTimeout(flush, everyMs).unref();
  };
  return (n, t) => {
    pending += n;
    total = t;
    if (!timer) flush();
  };
}
