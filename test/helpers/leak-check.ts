/**
 * Loaded into every test file's process by scripts/test.sh (`--import`). A server, socket, child
 * process or timer that a test leaves open keeps the file's process alive after its tests end, and
 * Node's runner would wait for it until the file's timeout. Once the file's tests are done, its
 * process gets a grace period to exit on its own; still held open after that, it names what holds
 * it and exits with a failure, so the leak fails the file within a minute instead of hanging.
 *
 * The grace period starts when the root `after` hooks start (this one runs first), so it also
 * covers the file's own `after` hooks: a cluster's shutdown takes seconds, at worst about 40 s.
 */
import { after } from 'node:test';
import path from 'node:path';

const GRACE_MS = 60_000;
// The runner's own pipes to the file, and requests that end on their own.
const IGNORED = new Set(['PipeWrap', 'TTYWrap', 'CloseReq', 'FSReqCallback', 'FSReqPromise', 'WriteWrap', 'ShutdownWrap']);

if (process.env.NODE_TEST_CONTEXT?.startsWith('child')) {
  after(() => {
    setTimeout(() => {
      const left = process.getActiveResourcesInfo().filter((r) => !IGNORED.has(r));
      const file = path.relative(process.cwd(), process.argv[1] ?? '?');
      process.stderr.write(
        `${file}: still held open ${GRACE_MS / 1000} s after its tests ended (close what a test opens in t.after): ${left.join(', ')}\n`,
      );
      process.exit(1);
    }, GRACE_MS).unref();
  });
}
