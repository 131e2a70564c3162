// Command podvisor-pause is the first process of every pod sandbox, as
// upstream's pause: it holds the pod's namespaces and does nothing else.
// podvisor packs it into the sandbox image when that image is missing, so it
// must stay static: it imports nothing that needs cgo.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// PID 1 of a pod sharing its PID namespace: reap the orphans.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
