/**
 * One full garbage collection once the agent has started. Start-up (compiling the bundle,
 * validating the configuration, the first API reads) leaves 5-15 MiB of garbage that V8's memory
 * reducer returns only 20-60 s later, so the agent's RSS would peak there for no reason. The
 * collection runs once, off the hot path, in a few milliseconds.
 */
import v8 from 'node:v8';
import vm from 'node:vm';

export function collectStartupGarbage(afterMs: number): void {
  setTimeout(() => {
    // `gc` is only exposed to contexts created after the flag is set: fetch it from a fresh one.
    v8.setFlagsFromString('--expose-gc');
    (vm.runInNewContext('gc') as () => void)();
  }, afterMs).unref();
}
