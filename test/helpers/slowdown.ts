/**
 * VIGIL_TEST_SLOWDOWN (a number, default 1): how much slower than native these tests run. Under
 * qemu's user mode (scripts/test-arm64.sh) worker threads take seconds to start, so the waits below
 * (RecordingSink.waitFor, the files' `until` loops) and the fake monitor's default watchdog are
 * stretched by this factor (and nvml-events.test.ts' 100 ms Xid latency bound). Which findings the
 * tests expect is unchanged.
 */
export const SLOWDOWN = Math.max(1, Number(process.env.VIGIL_TEST_SLOWDOWN) || 1);
/** ms stretched by VIGIL_TEST_SLOWDOWN. */
export const slow = (ms: number): number => Math.round(ms * SLOWDOWN);
