/**
 * The capture child: `node collect-child.js '<CaptureOptions JSON>'`, started by captureInChild
 * under nice/ionice. Writes one CHILD_COLLECTOR line per collector and a CHILD_RESULT (or
 * CHILD_ERROR) line on stdout. SIGTERM aborts the capture (collectors' process groups are killed).
 */
import os from 'node:os';
import { errorMessage } from '../util/errors.ts';
import { CHILD_COLLECTOR, CHILD_ERROR, CHILD_RESULT, PRIORITY_ENV, type CaptureOptions, type PriorityInfo } from './bundle.ts';
import { runCapture } from './collect.ts';

function priority(): PriorityInfo {
  let given: Omit<PriorityInfo, 'nice'> = { ioClass: null, via: [] };
  try {
    given = JSON.parse(process.env[PRIORITY_ENV] ?? '') as Omit<PriorityInfo, 'nice'>;
  } catch {
    /* started by hand */
  }
  const via = [...given.via];
  if (!via.some((v) => v.startsWith('nice'))) {
    // No nice program: lower ourselves (threads started from now on inherit it).
    try {
      os.setPriority(19);
      via.push('setpriority(19)');
    } catch {
      /* recorded as the nice value read below */
    }
  }
  let nice: number | null = null;
  try {
    nice = os.getPriority();
  } catch {
    /* unknown */
  }
  return { nice, ioClass: given.ioClass, via };
}

async function main(): Promise<number> {
  const ac = new AbortController();
  // A parent that went away must not crash the capture half-way (its staging files would stay behind).
  process.stdout.on('error', () => {});
  process.once('SIGTERM', () => ac.abort(new Error('capture stopped by SIGTERM')));
  try {
    const opts = JSON.parse(process.argv[2] ?? '') as CaptureOptions;
    const result = await runCapture(opts, ac.signal, {
      priority: priority(),
      onCollector: (r) => void process.stdout.write(`${CHILD_COLLECTOR}${JSON.stringify(r)}\n`),
    });
    process.stdout.write(`${CHILD_RESULT}${JSON.stringify(result)}\n`);
    return 0;
  } catch (err) {
    process.stdout.write(`${CHILD_ERROR}${JSON.stringify({ error: errorMessage(err) })}\n`);
    return 1;
  }
}

const code = await main();
// An NVML call may still be hung in a worker thread; Node would wait for it at exit.
const { nvmlThreadsLeft, exitNow } = await import('../sources/nvml/client.ts');
if (nvmlThreadsLeft() > 0) exitNow(code);
process.exit(code);
