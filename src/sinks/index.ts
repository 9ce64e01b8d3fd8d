/** The sinks: the log, the HTTP server (status, /healthz, Prometheus) and the Kubernetes Node. */
export { LogSink } from './log/log-sink.ts';
export { DEFAULT_MAX_CONNECTIONS, connectionCap, limitConnections, openFileLimit } from './http/connection-limit.ts';
export type { ShedReason } from './http/connection-limit.ts';
export { HttpServer } from './http/server.ts';
export type { ConnectionLimits, StatusProvider } from './http/server.ts';
export { Backoff } from './kubernetes/backoff.ts';
export {
  ApiPacer,
  KubeApiError,
  MERGE_PATCH,
  RequestTimeoutError,
  STRATEGIC_MERGE,
  USER_AGENT,
  makeClients,
  toFailure,
  withDeadline,
} from './kubernetes/client.ts';
export type { ApiFailure, CoreApi, CustomApi, EventsApi, KubeClients, RequestOptions } from './kubernetes/client.ts';
export { ConditionWriter, summarize } from './kubernetes/conditions.ts';
export type { ConditionWriterOptions, ExistingCondition } from './kubernetes/conditions.ts';
export { IN_CLUSTER_TOKEN, kubeConfigAvailable, resolveNodeName } from './kubernetes/detect.ts';
export { EventRecorder, REPORTING_CONTROLLER } from './kubernetes/events.ts';
export type { EventRecorderOptions } from './kubernetes/events.ts';
export { explainFailure } from './kubernetes/failures.ts';
export { KubernetesSink } from './kubernetes/sink.ts';
export type { KubernetesSinkOptions } from './kubernetes/sink.ts';
