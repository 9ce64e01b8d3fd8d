/**
 * Signals `vigil run` answers, so none a local root user or tool may send kills the agent with its
 * state unsaved: the ones that ask a process to end stop it cleanly (state saved), the rest are
 * ignored and logged. Not handled: SIGKILL and SIGSTOP (cannot be), and the fault signals (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT), after which running JavaScript is not safe.
 * SIGPIPE and SIGXFSZ Node already ignores; SIGUSR1 bin/vigil.js takes first (the inspector).
 */
import type { Logger } from 'pino';

/** Stop cleanly, like SIGTERM: a closed terminal (HUP), Ctrl-\ (QUIT), the CPU rlimit's warning before its SIGKILL (XCPU). */
export const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGXCPU'] as const;
/** Default-fatal signals that mean nothing to Vigil: kept running, each one logged (at most once a minute per signal). */
export const IGNORED_SIGNALS = ['SIGUSR1', 'SIGUSR2', 'SIGALRM', 'SIGVTALRM', 'SIGPROF', 'SIGIO', 'SIGPWR', 'SIGSTKFLT'] as const;

export interface SignalGuard {
  /** Resolves with the first stop signal's name. */
  stopped: Promise<string>;
  /** Where ignored signals are logged from now on (before: not logged, still ignored). */
  setLogger(log: Logger): void;
  remove(): void;
}

/** Installs the handlers; first thing in `run`, so a signal while the agent starts is answered too. */
export function guardSignals(now: () => number = Date.now): SignalGuard {
  let resolveStop: (signal: string) => void = () => {};
  const stopped = new Promise<string>((resolve) => (resolveStop = resolve));
  let log: Logger | undefined;
  const lastLogged = new Map<string, number>();
  const installed: [NodeJS.Signals, () => void][] = [];
  for (const signal of STOP_SIGNALS) installed.push([signal, () => resolveStop(signal)]);
  for (const signal of IGNORED_SIGNALS) {
    installed.push([
      signal,
      () => {
        const t = now();
        if (!log || t - (lastLogged.get(signal) ?? -Infinity) < 60_000) return;
        lastLogged.set(signal, t);
        log.warn({ event: 'signal', signal, action: 'ignored' }, `${signal} ignored: Vigil stops on SIGTERM`);
      },
    ]);
  }
  for (const [signal, handler] of installed) process.on(signal, handler);
  return {
    stopped,
    setLogger: (l) => (log = l),
    remove: () => {
      for (const [signal, handler] of installed) process.removeListener(signal, handler);
    },
  };
}
