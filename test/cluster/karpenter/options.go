package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/utils/env"
)

// Registered as a Karpenter Injectable so the flags live in Karpenter's own flag set (it rejects unknown flags).
func init() {
	options.Injectables = append(options.Injectables, &vigilOptions{})
}

type vigilOptionsKey struct{}

type vigilOptions struct {
	scaleStr        string
	overridesStr    string
	tolerationScale float64
	overrides       map[string]time.Duration
}

func (o *vigilOptions) AddFlags(fs *options.FlagSet) {
	fs.StringVar(&o.scaleStr, "repair-toleration-scale", env.WithDefaultString("VIGIL_REPAIR_TOLERATION_SCALE", "1"),
		"Multiplies every repair policy toleration (tests use e.g. 0.05)")
	fs.StringVar(&o.overridesStr, "repair-tolerations", env.WithDefaultString("VIGIL_REPAIR_TOLERATIONS", ""),
		`Absolute toleration per condition type, "AcceleratedHardwareReady=30s,KernelReady=1m" ("*" = every type)`)
}

func (o *vigilOptions) Parse(fs *options.FlagSet, args ...string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return fmt.Errorf("parsing flags, %w", err)
	}
	scale, err := strconv.ParseFloat(o.scaleStr, 64)
	if err != nil || scale <= 0 {
		return fmt.Errorf("--repair-toleration-scale: want a number > 0, got %q", o.scaleStr)
	}
	o.tolerationScale = scale
	if o.overrides, err = parseOverrides(o.overridesStr); err != nil {
		return fmt.Errorf("--repair-tolerations: %w", err)
	}
	return nil
}

func (o *vigilOptions) ToContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, vigilOptionsKey{}, o)
}

func fromContext(ctx context.Context) *vigilOptions {
	return ctx.Value(vigilOptionsKey{}).(*vigilOptions)
}
