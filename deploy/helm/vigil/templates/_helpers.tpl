{{- define "vigil.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{ else }}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{ end }}
{{- end }}

{{- define "vigil.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "vigil.labels" -}}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/*
What each monitor needs from the host; the DaemonSet asks for these and nothing else.
  hostRoot     the host's / read-only at /host: storage (statfs of the host's filesystems, its
               mount table), networking (kubelet kubeconfig for DNS, /proc/sys/net), runtime
               (containerd socket, systemd and D-Bus sockets). It also holds /host/proc and /host/sys.
  hostProc     /proc at /host/proc, when hostRoot is not mounted: kernel (limits, zombies).
  hostSys      /sys at /host/sys, when hostRoot is not mounted: kernel (warn_count), gpu (PCI inventory).
  kmsg         /dev/kmsg: kernelLog.
  nvidiaLib    gpu.hostLibraryDir: gpu (libnvidia-ml.so.1).
  hostNetwork  networking (ethtool and /proc/sys/net answer for the caller's network namespace),
               runtime (kubelet's healthz listens on the node's 127.0.0.1:10248).
  privileged   kernelLog, gpu (device access; see values.yaml "privileged").
hostPID is never needed: /host/proc is the host's procfs, which shows the host's processes.
*/}}
{{- define "vigil.needs" -}}
{{- $m := .Values.monitors -}}
{{- $root := or $m.storage $m.networking $m.runtime -}}
hostRoot: {{ $root }}
hostProc: {{ and (not $root) $m.kernel }}
hostSys: {{ and (not $root) (or $m.kernel $m.gpu) }}
kmsg: {{ $m.kernelLog }}
nvidiaLib: {{ and $m.gpu (ne .Values.gpu.hostLibraryDir "") }}
hostNetwork: {{ or $m.networking $m.runtime }}
privileged: {{ and .Values.privileged (or $m.kernelLog $m.gpu) }}
{{- end }}
