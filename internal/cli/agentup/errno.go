package agentup

import "syscall"

var errAddrInUse = syscall.EADDRINUSE
