package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/podvisor/podvisor/internal/cli/crictl"
)

func runCrictl(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	dir, err := dataDirFromConfig("")
	if err != nil {
		return err
	}
	return crictl.Run(ctx, args, dir, os.Stdout)
}
