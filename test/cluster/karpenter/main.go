// Command karpenter-vigil is Karpenter's kwok cloud provider (sigs.k8s.io/karpenter/kwok) with one change:
// its repair policies are those of Karpenter's AWS provider for the condition types Vigil writes, so the real
// node repair engine acts on Vigil's conditions. The stock kwok provider only repairs Ready (and its own
// simulated KWOK* conditions), which would prove nothing about Vigil.
//
// Tolerations can be shortened for tests (a 10-minute toleration is too long for a test run):
//
//	--repair-toleration-scale / VIGIL_REPAIR_TOLERATION_SCALE   multiplies every toleration (e.g. 0.05: 10m -> 30s)
//	--repair-tolerations / VIGIL_REPAIR_TOLERATIONS             absolute per-type overrides, "Type=30s,Other=1m" ("*" = all)
//
// Everything else (flags, env, feature gates such as FEATURE_GATES=NodeRepair=true, LEGACY_NODE_REPAIR) is
// Karpenter's own.
package main

import (
	"github.com/samber/lo"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

func main() {
	// NewOperator parses every registered Injectable, ours included (see options.go).
	ctx, op := operator.NewOperator()
	opts := fromContext(ctx)
	policies, err := vigilRepairPolicies(opts.tolerationScale, opts.overrides)
	if err != nil {
		log.FromContext(ctx).Error(err, "invalid repair toleration settings")
		panic(err)
	}
	for _, p := range policies {
		log.FromContext(ctx).Info("vigil repair policy", "condition", p.ConditionType, "status", p.ConditionStatus,
			"reason-regex", p.ReasonRegex, "toleration", p.TolerationDuration.String())
	}

	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
	}
	undecorated := &vigilCloudProvider{CloudProvider: kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes), policies: policies}
	cloudProvider := overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	matcher := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	cluster := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(matcher))
	op.WithControllers(ctx, controllers.NewControllers(
		ctx,
		op.Manager,
		op.Clock,
		op.GetClient(),
		op.EventRecorder,
		cloudProvider,
		undecorated,
		cluster,
		op.InstanceTypeStore,
		op.PredictionStore,
	)...).Start(ctx)
}
