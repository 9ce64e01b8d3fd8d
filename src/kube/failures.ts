/** Turns an API failure into one sentence an operator can act on. */
import type { ApiFailure } from './client.ts';

export function explainFailure(verbResource: string, node: string, f: ApiFailure): string {
  switch (f.status) {
    case 0:
      return `cannot reach the API server to ${verbResource} (${f.message}); detection continues and the node is written when it is back`;
    case 401:
      return `the API server rejected Vigil's credentials (401) for ${verbResource}: ${f.message}`;
    case 403:
      // An admission policy (deploy/admission-policy.yaml) also answers 403; RBAC is not the fix then.
      if (/admission|ValidatingAdmissionPolicy|webhook/i.test(f.message)) {
        return `admission denied: Vigil may not ${verbResource} on node ${node} (403 from an admission policy, not RBAC; check that --node-name / NODE_NAME is the node this pod runs on). API server said: ${f.message}`;
      }
      return `permission denied: Vigil may not ${verbResource} on node ${node}. Grant "${verbResource}" to Vigil's ServiceAccount (deploy/rbac.yaml ships the exact ClusterRole). API server said: ${f.message}`;
    case 404:
      return `node ${node} does not exist (404) for ${verbResource}; check --node-name / NODE_NAME`;
    case 409:
      return `conflict (409) on ${verbResource}: ${f.message}; retrying with the latest state`;
    case 422:
      return `the API server refused the request as invalid (422) for ${verbResource}: ${f.message}`;
    case 429:
      return `the API server is throttling Vigil (429) for ${verbResource}; backing off`;
    default:
      return `${verbResource} failed with HTTP ${f.status}: ${f.message}; retrying with backoff`;
  }
}
