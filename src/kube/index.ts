/** The Kubernetes API client: clients from a kubeconfig, request deadlines and pacing, failure accounting. */
export {
  ApiPacer,
  IDENTITY_TTL_MS,
  KubeApiError,
  MERGE_PATCH,
  REPORTING_CONTROLLER,
  RequestTimeoutError,
  STRATEGIC_MERGE,
  USER_AGENT,
  makeClients,
  toFailure,
  withDeadline,
} from './client.ts';
export type { ApiFailure, ClientTuning, CoreApi, CustomApi, EventsApi, KubeClients, NodeEventRecorder, RequestOptions } from './client.ts';
export { IN_CLUSTER_TOKEN, kubeConfigAvailable, resolveNodeName } from './detect.ts';
export { explainFailure } from './failures.ts';
