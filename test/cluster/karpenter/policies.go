package main

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
)

// vigilCloudProvider is the kwok provider with Vigil's repair policies.
type vigilCloudProvider struct {
	*kwok.CloudProvider
	policies []cloudprovider.RepairPolicy
}

func (c *vigilCloudProvider) RepairPolicies() []cloudprovider.RepairPolicy { return c.policies }

// Condition types and tolerations of Karpenter's AWS provider (aws/karpenter-provider-aws,
// pkg/cloudprovider/cloudprovider.go, v1.2 through v1.14): the EKS node monitoring agent's types, which Vigil
// writes with status False when faulty. Ready is the kubelet's. Matching is by type and status only; the
// reason-specific defaults announced for the AWS provider's v1.15 are not reproduced.
const (
	acceleratedHardwareReady corev1.NodeConditionType = "AcceleratedHardwareReady"
	kernelReady              corev1.NodeConditionType = "KernelReady"
	networkingReady          corev1.NodeConditionType = "NetworkingReady"
	storageReady             corev1.NodeConditionType = "StorageReady"
	containerRuntimeReady    corev1.NodeConditionType = "ContainerRuntimeReady"
)

// basePolicies returns the unscaled set. Karpenter v1.15 requires exactly one policy without a ReasonRegex (the
// default fallback, action ReplaceNode); Ready=False takes that role, the others match any reason (".*").
func basePolicies() []cloudprovider.RepairPolicy {
	replace := func(t corev1.NodeConditionType, s corev1.ConditionStatus, regex string, d time.Duration) cloudprovider.RepairPolicy {
		return cloudprovider.RepairPolicy{ConditionType: t, ConditionStatus: s, ReasonRegex: regex, TolerationDuration: d, Action: cloudprovider.ReplaceNode}
	}
	return []cloudprovider.RepairPolicy{
		replace(corev1.NodeReady, corev1.ConditionFalse, "", 30*time.Minute),
		replace(corev1.NodeReady, corev1.ConditionUnknown, ".*", 30*time.Minute),
		replace(acceleratedHardwareReady, corev1.ConditionFalse, ".*", 10*time.Minute),
		replace(storageReady, corev1.ConditionFalse, ".*", 30*time.Minute),
		replace(networkingReady, corev1.ConditionFalse, ".*", 30*time.Minute),
		replace(kernelReady, corev1.ConditionFalse, ".*", 30*time.Minute),
		replace(containerRuntimeReady, corev1.ConditionFalse, ".*", 30*time.Minute),
	}
}

// vigilRepairPolicies scales every toleration by scale, then applies absolute per-type overrides.
func vigilRepairPolicies(scale float64, overrides map[string]time.Duration) ([]cloudprovider.RepairPolicy, error) {
	if scale <= 0 {
		return nil, fmt.Errorf("repair toleration scale must be > 0, got %v", scale)
	}
	policies := basePolicies()
	known := map[string]bool{"*": true}
	for i := range policies {
		p := &policies[i]
		known[string(p.ConditionType)] = true
		p.TolerationDuration = time.Duration(float64(p.TolerationDuration) * scale).Round(time.Millisecond)
		if d, ok := overrides["*"]; ok {
			p.TolerationDuration = d
		}
		if d, ok := overrides[string(p.ConditionType)]; ok {
			p.TolerationDuration = d
		}
	}
	for t := range overrides {
		if !known[t] {
			return nil, fmt.Errorf("repair toleration override names unknown condition type %q", t)
		}
	}
	return policies, nil
}

// parseOverrides reads "Type=30s,Other=1m".
func parseOverrides(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("repair toleration override %q: want Type=duration", item)
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("repair toleration override %q: bad duration %q", item, v)
		}
		out[strings.TrimSpace(k)] = d
	}
	return out, nil
}
