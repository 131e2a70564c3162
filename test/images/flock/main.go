// Command flock is the part of util-linux's flock(1) that podvisor's test
// scripts use, for the busybox test image: Debian's busybox-static is built
// without the flock applet that upstream's busybox image has.
//
//	flock [-n] FD   locks the open file FD exclusively; with -n it exits 1
//	                at once when another holds the lock, else it waits
//
// The lock belongs to the open file, not to this process: it stays held, as
// with flock(1), until every process sharing FD has closed it.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func main() {
	args := os.Args[1:]
	how := syscall.LOCK_EX
	if len(args) > 0 && args[0] == "-n" {
		how |= syscall.LOCK_NB
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: flock [-n] FD")
		os.Exit(64)
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "flock: %q is not a file descriptor number\n", args[0])
		os.Exit(64)
	}
	for {
		err = syscall.Flock(fd, how)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EWOULDBLOCK {
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "flock: %d: %v\n", fd, err)
		os.Exit(66)
	}
}
