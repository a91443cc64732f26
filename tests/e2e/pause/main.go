// The one program of the pod sandbox image that tests/e2e imports into containerd: it holds the
// pod's namespaces open and waits for a signal to end (SIGINT/SIGTERM), reaping any child that
// the runtime re-parents to it (it is the pod's PID 1 where the pod shares one PID namespace).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
