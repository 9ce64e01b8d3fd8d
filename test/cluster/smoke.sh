#!/usr/bin/env bash
# End-to-end check of a running cluster (started by up.sh) with plain curl + jq:
# nodes list, Node create, strategic-merge PATCH of /status, static-token RBAC, ServiceAccount +
# pod-bound TokenRequest, ValidatingAdmissionPolicy enforcement, apiserver stop/start keeping data.
#   test/cluster/smoke.sh [STATE_DIR]     (default $VIGIL_CLUSTER_DIR, then <repo>/.cluster)
# Env: VIGIL_SMOKE_DOWNTIME=<seconds> apiserver downtime in the restart check (default 3).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VIGIL_LOG_PREFIX="smoke.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
command -v jq >/dev/null 2>&1 || die "jq is required"

DIR="$(cd "${1:-${VIGIL_CLUSTER_DIR:-$VIGIL_REPO_ROOT/.cluster}}" && pwd)"
[[ -f "$DIR/cluster.json" ]] || die "no cluster.json in $DIR (run up.sh)"
SERVER="$(jq -r .server "$DIR/cluster.json")"
CA="$(jq -r .caFile "$DIR/cluster.json")"
ADMIN="$(cat "$DIR/admin.token")"
AGENT="$(cat "$DIR/agent.token")"
SUF="$(openssl rand -hex 3)"
NODE="vigil-smoke-node-$SUF"; NS="vigil-smoke-$SUF"; POL="vigil-smoke-$SUF"

# req TOKEN METHOD PATH [CONTENT_TYPE BODY] -> prints "<http code> <body>"
req() {
  local tok="$1" method="$2" path="$3" ctype="${4:-application/json}" body="${5:-}" out code
  local -a extra=()
  [[ -n "$body" ]] && extra=(-H "Content-Type: $ctype" --data-binary "$body")
  out="$(curl -sS --max-time 20 --cacert "$CA" -H "Authorization: Bearer $tok" -H 'Accept: application/json' \
    -X "$method" "${extra[@]}" -w '\n%{http_code}' "$SERVER$path")"
  code="${out##*$'\n'}"; printf '%s %s' "$code" "${out%$'\n'*}"
}
expect() { # WANT_CODE DESCRIPTION RESPONSE
  local code="${3%% *}"
  if [[ "$code" != "$1" ]]; then printf 'FAIL %s: want HTTP %s, got %s\n' "$2" "$1" "$3" >&2; exit 1; fi
  printf 'ok   %s (HTTP %s)\n' "$2" "$code" >&2
}
body() { printf '%s' "${1#* }"; }

# Cleanup of what we created (the cluster keeps running), also on failure. Without
# kube-controller-manager a deleted namespace stays Terminating forever, hence random name suffixes.
cleanup() {
  req "$ADMIN" DELETE "/api/v1/nodes/$NODE" >/dev/null || true
  req "$ADMIN" DELETE "/api/v1/namespaces/$NS" >/dev/null || true
  local p
  for p in admissionregistration.k8s.io/v1/validatingadmissionpolicybindings admissionregistration.k8s.io/v1/validatingadmissionpolicies \
           rbac.authorization.k8s.io/v1/clusterrolebindings rbac.authorization.k8s.io/v1/clusterroles; do
    req "$ADMIN" DELETE "/apis/$p/$POL" >/dev/null || true
  done
}
trap cleanup EXIT

r="$(req "$ADMIN" GET /version)"; expect 200 "GET /version -> $(body "$r" | jq -r .gitVersion)" "$r"
r="$(req "$ADMIN" GET /api/v1/nodes)"; expect 200 "admin GET /api/v1/nodes" "$r"

# --- Node + status strategic merge patch ---
r="$(req "$ADMIN" POST /api/v1/nodes application/json \
  "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$NODE\",\"labels\":{\"kubernetes.io/hostname\":\"$NODE\"}}}")"
expect 201 "POST Node $NODE" "$r"
NOW="$(date -u +%FT%TZ)"
r="$(req "$ADMIN" PATCH "/api/v1/nodes/$NODE/status" application/strategic-merge-patch+json \
  "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"fake\",\"lastHeartbeatTime\":\"$NOW\",\"lastTransitionTime\":\"$NOW\"}]}}")"
expect 200 "PATCH nodes/$NODE/status (strategic merge) Ready" "$r"
r="$(req "$ADMIN" PATCH "/api/v1/nodes/$NODE/status" application/strategic-merge-patch+json \
  "{\"status\":{\"conditions\":[{\"type\":\"VigilDiskPressure\",\"status\":\"True\",\"reason\":\"SmokeTest\",\"message\":\"added by smoke.sh\",\"lastHeartbeatTime\":\"$NOW\",\"lastTransitionTime\":\"$NOW\"}]}}")"
expect 200 "PATCH nodes/$NODE/status (strategic merge) VigilDiskPressure" "$r"
types="$(body "$r" | jq -r '[.status.conditions[].type] | sort | join(",")')"
[[ "$types" == "Ready,VigilDiskPressure" ]] || die "conditions after merge: $types (want Ready,VigilDiskPressure)"
printf 'ok   conditions merged by type: %s\n' "$types" >&2

# --- RBAC with the static agent token ---
r="$(req "$AGENT" GET /api/v1/nodes)"; expect 403 "agent GET nodes before RBAC" "$r"
r="$(req "$ADMIN" POST /apis/rbac.authorization.k8s.io/v1/clusterroles application/json \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"'"$POL"'"},"rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get","list"]},{"apiGroups":[""],"resources":["nodes/status"],"verbs":["patch"]}]}')"
expect 201 "POST ClusterRole" "$r"
r="$(req "$ADMIN" POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings application/json \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"'"$POL"'"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"'"$POL"'"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"vigil-agent"}]}')"
expect 201 "POST ClusterRoleBinding to User vigil-agent" "$r"
for _ in $(seq 1 50); do r="$(req "$AGENT" GET "/api/v1/nodes/$NODE")"; [[ "${r%% *}" == 200 ]] && break; sleep 0.2; done
expect 200 "agent GET node after RBAC" "$r"
r="$(req "$AGENT" PATCH "/api/v1/nodes/$NODE/status" application/strategic-merge-patch+json \
  "{\"status\":{\"conditions\":[{\"type\":\"VigilDiskPressure\",\"status\":\"False\",\"reason\":\"Recovered\",\"message\":\"agent\",\"lastHeartbeatTime\":\"$NOW\",\"lastTransitionTime\":\"$NOW\"}]}}")"
expect 200 "agent PATCH nodes/status" "$r"
r="$(req "$AGENT" DELETE "/api/v1/nodes/$NODE")"; expect 403 "agent DELETE node (not granted)" "$r"

# --- ServiceAccount + Pod + pod-bound TokenRequest ---
r="$(req "$ADMIN" POST /api/v1/namespaces application/json "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$NS\"}}")"
expect 201 "POST Namespace $NS" "$r"
r="$(req "$ADMIN" POST "/api/v1/namespaces/$NS/serviceaccounts" application/json \
  '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"vigil"}}')"
expect 201 "POST ServiceAccount vigil" "$r"
r="$(req "$ADMIN" POST "/api/v1/namespaces/$NS/pods" application/json \
  "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"vigil-agent\"},\"spec\":{\"nodeName\":\"$NODE\",\"serviceAccountName\":\"vigil\",\"containers\":[{\"name\":\"agent\",\"image\":\"example.invalid/vigil:test\"}]}}")"
expect 201 "POST Pod with spec.nodeName (no scheduler)" "$r"
POD_UID="$(body "$r" | jq -r .metadata.uid)"
r="$(req "$ADMIN" POST "/api/v1/namespaces/$NS/serviceaccounts/vigil/token" application/json \
  "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenRequest\",\"spec\":{\"expirationSeconds\":3600,\"boundObjectRef\":{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"vigil-agent\",\"uid\":\"$POD_UID\"}}}")"
expect 201 "POST TokenRequest bound to the pod" "$r"
SA_TOKEN="$(body "$r" | jq -r .status.token)"
r="$(req "$SA_TOKEN" POST /apis/authentication.k8s.io/v1/selfsubjectreviews application/json \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}')"
expect 201 "SelfSubjectReview with the bound token" "$r"
who="$(body "$r" | jq -r '.status.userInfo.username + " pod=" + (.status.userInfo.extra["authentication.kubernetes.io/pod-name"][0] // "?")')"
[[ "$who" == "system:serviceaccount:$NS:vigil pod=vigil-agent" ]] || die "unexpected identity: $who"
printf 'ok   bound token authenticates as %s\n' "$who" >&2

# --- ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) ---
r="$(req "$ADMIN" POST /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies application/json \
  '{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"name":"'"$POL"'"},"spec":{"failurePolicy":"Fail","matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE","UPDATE"],"resources":["configmaps"]}]},"validations":[{"expression":"!has(object.data) || !(\"forbidden\" in object.data)","message":"vigil-smoke forbids key forbidden"}]}}')"
expect 201 "POST ValidatingAdmissionPolicy" "$r"
r="$(req "$ADMIN" POST /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings application/json \
  "{\"apiVersion\":\"admissionregistration.k8s.io/v1\",\"kind\":\"ValidatingAdmissionPolicyBinding\",\"metadata\":{\"name\":\"$POL\"},\"spec\":{\"policyName\":\"$POL\",\"validationActions\":[\"Deny\"],\"matchResources\":{\"namespaceSelector\":{\"matchLabels\":{\"kubernetes.io/metadata.name\":\"$NS\"}}}}}")"
expect 201 "POST ValidatingAdmissionPolicyBinding" "$r"
for i in $(seq 1 60); do
  r="$(req "$ADMIN" POST "/api/v1/namespaces/$NS/configmaps" application/json \
    "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm-$i\"},\"data\":{\"forbidden\":\"x\"}}")"
  [[ "${r%% *}" != 201 ]] && break; sleep 0.5
done
expect 422 "ConfigMap rejected by the policy: $(body "$r" | jq -r .message)" "$r"

# --- apiserver stop/start keeping storage ---
DOWN="${VIGIL_SMOKE_DOWNTIME:-3}"
bash "$HERE/apiserver.sh" stop "$DIR"
if curl -s --max-time 2 --cacert "$CA" "$SERVER/readyz" >/dev/null 2>&1; then die "apiserver still answering after stop"; fi
printf 'ok   apiserver down; waiting %ss\n' "$DOWN" >&2
sleep "$DOWN"
bash "$HERE/apiserver.sh" start "$DIR"
r="$(req "$ADMIN" GET "/api/v1/nodes/$NODE")"; expect 200 "node survives apiserver restart on the same port" "$r"
[[ "$(body "$r" | jq -r '[.status.conditions[].type] | sort | join(",")')" == "Ready,VigilDiskPressure" ]] || die "conditions lost after restart"
r="$(req "$SA_TOKEN" POST /apis/authentication.k8s.io/v1/selfsubjectreviews application/json \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}')"
expect 201 "bound token still valid after restart" "$r"

echo "smoke: all checks passed ($DIR)" >&2
