/**
 * The Kubernetes sink's EventRecorder as the unit tests build it: node n1 in default, a silent log,
 * its own registry, 6 Events per reason a minute, on the test's clock; `extra` overrides any of it.
 */
import pino from 'pino';
import { Registry } from 'prom-client';
import { EventRecorder, type EventRecorderOptions } from '../../src/sinks/index.ts';
import { type KubeClients } from '../../src/kube/index.ts';

export function testEventRecorder(clients: KubeClients, now: () => number, extra: Partial<EventRecorderOptions> = {}): EventRecorder {
  return new EventRecorder({
    clients,
    nodeName: 'n1',
    namespace: 'default',
    log: pino({ level: 'silent' }),
    registry: new Registry(),
    perReasonPerMinute: 6,
    instance: 'vigil-test',
    now,
    ...extra,
  });
}
