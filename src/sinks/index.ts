/** The sinks: the log, the HTTP server (status, /healthz, Prometheus) and the Kubernetes Node. */
export { LogSink } from './log/log-sink.ts';
export { DEFAULT_MAX_CONNECTIONS, connectionCap, limitConnections, openFileLimit } from './http/connection-limit.ts';
export type { ShedReason } from './http/connection-limit.ts';
export { HttpServer } from './http/server.ts';
export type { ConnectionLimits, StatusProvider } from './http/server.ts';
export { ConditionWriter, summarize } from './kubernetes/conditions.ts';
export type { ConditionWriterOptions, ExistingCondition } from './kubernetes/conditions.ts';
export { EventRecorder } from './kubernetes/events.ts';
export type { EventRecorderOptions } from './kubernetes/events.ts';
export { KubernetesSink } from './kubernetes/sink.ts';
export type { KubernetesSinkOptions } from './kubernetes/sink.ts';
