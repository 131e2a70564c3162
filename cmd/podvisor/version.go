package main

import (
	"fmt"
	"runtime"

	"github.com/podvisor/podvisor/internal/cli/version"
)

func versionCmd() {
	fmt.Printf("podvisor %s (Kubernetes %s, %s, %s/%s)\n", version.Version, version.Kubernetes,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
