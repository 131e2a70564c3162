package controlplane

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	cmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	cmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	// The components report v1.36.3, not upstream's placeholder version.
	_ "github.com/podvisor/podvisor/internal/cluster/kubeversion"
)

// parse applies command-line style arguments to every flag set of a component,
// so podvisor configures the components exactly as their own binaries would.
func parse(name string, sets cliflag.NamedFlagSets, args []string) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, s := range sets.FlagSets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s flags: %w", name, err)
	}
	return nil
}

// runAPIServer builds the kube-apiserver from its options (not its cobra
// command, which installs a second signal handler) and runs it until ctx ends.
func runAPIServer(ctx context.Context, args []string) (func() error, error) {
	s := apiserveroptions.NewServerRunOptions()
	if err := parse("kube-apiserver", s.Flags(), args); err != nil {
		return nil, err
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	return func() error { return apiserverapp.Run(ctx, completed) }, nil
}

func runControllerManager(ctx context.Context, args []string) (func() error, error) {
	s, err := cmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, err
	}
	known, disabled, aliases := cmapp.KnownControllers(), cmapp.ControllersDisabledByDefault(), cmapp.ControllerAliases()
	sets := s.Flags(known, disabled, aliases)
	if err := parse("kube-controller-manager", sets, args); err != nil {
		return nil, err
	}
	s.ParsedFlags = &sets
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	c, err := s.Config(ctx, known, disabled, aliases)
	if err != nil {
		return nil, err
	}
	return func() error { return cmapp.Run(ctx, c.Complete()) }, nil
}

func runScheduler(ctx context.Context, args []string) (func() error, error) {
	opts := schedoptions.NewOptions()
	if err := parse("kube-scheduler", *opts.Flags, args); err != nil {
		return nil, err
	}
	cc, sched, err := schedapp.Setup(ctx, opts)
	if err != nil {
		return nil, err
	}
	return func() error { return schedapp.Run(ctx, cc, sched) }, nil
}
