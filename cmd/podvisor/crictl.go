package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/podvisor/podvisor/internal/crictl"
	"github.com/podvisor/podvisor/internal/datadir"
)

func runCrictl(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return crictl.Run(ctx, args, datadir.Default(), os.Stdout)
}
