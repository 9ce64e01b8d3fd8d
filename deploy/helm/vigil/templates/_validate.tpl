{{/*
Values that values.schema.json cannot judge, refused here with the reason, so that `helm install`
fails rather than rendering a DaemonSet whose every pod crash-loops or that runs without its safety
net (quarantine without the admission policy is refused by the schema). `helm lint` only logs a
`fail` (helm's lint mode, by design). Called by configmap.yaml with the configuration it renders.
*/}}
{{- define "vigil.validate" -}}
{{- $v := .root.Values }}
{{- /* The agent refuses two conditions under one name: they would overwrite each other on the Node. */}}
{{- $seen := dict }}
{{- range $type, $name := $v.conditions.names }}
{{- if hasKey $seen $name }}
{{- fail (printf "conditions.names.%s: %q is already the name of %s (two conditions under one name overwrite each other on the Node)" $type $name (get $seen $name)) }}
{{- end }}
{{- $_ := set $seen $name $type }}
{{- end }}
{{- /* Keys the chart renders from its values: extraConfig must not contradict the pod around them. */}}
{{- $owned := deepCopy .config }}
{{- $_ := set $owned "nodeName" "" }}
{{- include "vigil.validateExtra" (dict "extra" $v.extraConfig "owned" $owned "path" "extraConfig") }}
{{- end }}

{{/* Where the chart takes a configuration key from, when that is not the value of the same name. */}}
{{- define "vigil.ownedBy" -}}
{{- $by := dict
  "listen" "the value port (the probes and the metrics port follow it)"
  "stateDir" "the value stateHostPath (mounted at /var/lib/vigil)"
  "nodeName" "each pod's NODE_NAME (a DaemonSet runs one agent per node)"
  "kernelLog.enabled" "the value monitors.kernelLog (the pod's mounts follow it)"
  "gpu.enabled" "the value monitors.gpu (the pod's mounts follow it)"
  "gpu.libraryPath" "the value gpu.hostLibraryDir (mounted under /host)"
  "kubernetes.mode" "the pod (on: the agent reports to its cluster)"
  "kubernetes.eventNamespace" "the value eventNamespace"
  "monitors.hostRoot" "the pod (the host's / is mounted at /host)"
}}
{{- $key := trimPrefix "extraConfig." . }}
{{- if hasKey $by $key }}{{ get $by $key }}
{{- else if regexMatch "^monitors\\.[^.]+\\.enabled$" $key }}the value {{ trimSuffix ".enabled" $key }} (the pod's mounts follow it)
{{- else }}the value {{ $key }}
{{- end }}
{{- end }}

{{- define "vigil.validateExtra" -}}
{{- $owned := .owned }}
{{- $path := .path }}
{{- range $key, $value := .extra }}
{{- if hasKey $owned $key }}
{{- $here := printf "%s.%s" $path $key }}
{{- $mine := get $owned $key }}
{{- if and (kindIs "map" $value) (kindIs "map" $mine) }}
{{- include "vigil.validateExtra" (dict "extra" $value "owned" $mine "path" $here) }}
{{- else }}
{{- fail (printf "%s: the chart sets this key from %s; set that instead" $here (include "vigil.ownedBy" $here)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
