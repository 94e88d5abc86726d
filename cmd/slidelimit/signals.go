package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// stopOnSignal returns a context that the first SIGTERM or SIGINT ends, and the channel that
// takes every stop signal after it; release undoes both. The proxy and the rls service call it
// before they build their limiters, which takes a while for a large config: a stop asked for
// meanwhile is a stop (exit 0), not a kill by the signal's default action. A stop signal read from
// later, during the graceful shutdown, cuts off what is in flight.
//
// One channel takes every stop signal from the start. With room for two, a second signal that
// comes before the shutdown listens for it is held, where a channel of its own, registered only
// then, lost it; unless it comes so soon after the first that the two are one: the kernel and the
// Go runtime do not queue a signal that is already pending.
//
// Its goroutine ends with ctx: at the first signal, or at stop or release.
func stopOnSignal() (ctx context.Context, stop context.CancelFunc, later <-chan os.Signal, release func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	ctx, stop = context.WithCancel(context.Background())
	go func() {
		select {
		case <-ch:
			stop()
		case <-ctx.Done():
		}
	}()
	return ctx, stop, ch, func() {
		signal.Stop(ch)
		stop()
	}
}
