package up

import "syscall"

var errAddrInUse = syscall.EADDRINUSE
