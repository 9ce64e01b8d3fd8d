/**
 * The log sink writes its lines once the turn that found them is over (a fresh agent's first
 * Kubernetes request goes first), in order, and close() writes what is still waiting.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { setImmediate as immediate } from 'node:timers/promises';
import pino from 'pino';
import type { ActiveProblem, EngineEvent } from '../../src/api/index.ts';
import { LogSink } from '../../src/sinks/index.ts';

function capture() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString('utf8').split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return { lines, sink: new LogSink(pino({ level: 'info' }, stream)) };
}

function fatal(entity: string): EngineEvent {
  return {
    kind: 'finding',
    finding: {
      reason: 'NvidiaXID79Error',
      message: `GPU ${entity} has fallen off the bus`,
      source: 'kmsg',
      entity,
      at: 0,
      severity: 'Fatal',
      condition: 'AcceleratedHardwareReady',
      action: 'reboot',
      count: 1,
    },
  };
}

test('lines are written after the turn that handled them, in order; a repeat writes none', async () => {
  const { lines, sink } = capture();
  sink.handle(fatal('gpu:0000:01:00.0'));
  sink.handle({ kind: 'repeat', problem: {} as ActiveProblem });
  sink.handle(fatal('gpu:0000:02:00.0'));
  await Promise.resolve();
  assert.equal(lines.length, 0, 'nothing written within the turn (nor by its microtasks)');
  await immediate();
  await immediate();
  assert.deepEqual(
    lines.map((l) => [l.event, l.entity, l.msg]),
    [
      ['finding', 'gpu:0000:01:00.0', 'GPU gpu:0000:01:00.0 has fallen off the bus'],
      ['finding', 'gpu:0000:02:00.0', 'GPU gpu:0000:02:00.0 has fallen off the bus'],
    ],
  );
});

test('close() writes what is still waiting', async () => {
  const { lines, sink } = capture();
  sink.handle(fatal('gpu:0000:03:00.0'));
  await sink.close();
  assert.equal(lines.length, 1, 'written by close(), not by the immediate');
  assert.equal(lines[0].entity, 'gpu:0000:03:00.0');
});
