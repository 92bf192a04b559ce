// Command okiba runs an okiba broker (okiba serve) and talks to one over its HTTP API
// (every other command). Run 'okiba help' for the list of commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx: serve shuts down gracefully, a redrive being
	// followed is cancelled. Then the default handling is restored, so a second one kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	os.Exit(newOSApp().run(ctx, os.Args[1:]))
}
