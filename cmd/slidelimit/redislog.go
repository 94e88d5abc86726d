package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/redisstore"
)

// redisLogger receives go-redis's own log lines (dial failures, pool errors), which it would
// otherwise print on stderr in its own format, several a second while Redis is down: that
// breaks -log-format json and floods the log. It forwards at most one line per interval, with the
// number it dropped since the last one, and hides the Redis password (raw; none when empty, as for
// the failed TLS handshakes serverErrLog throttles with it).
type redisLogger struct {
	emit     func(msg string, suppressed int)
	raw      string // the Redis URL, whose password is hidden in every line
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Printf is go-redis's logging interface (redis.SetLogger).
func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimSpace(redisstore.RedactText(fmt.Sprintf(format, v...), l.raw))
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.emit(msg, n)
}

var (
	// redisLogTarget is where the process-wide go-redis logger forwards to; the logger itself is
	// installed once, since redis.SetLogger is global and not meant to be swapped under load.
	redisLogTarget  atomic.Pointer[redisLogger]
	redisLogInstall sync.Once
)

// forwardRedisLog sends go-redis's log lines to emit, at most one a second, with the password of
// redisURL hidden. Call it before the Redis client is made, so that no line escapes.
func forwardRedisLog(emit func(msg string, suppressed int), redisURL string) {
	redisLogTarget.Store(&redisLogger{emit: emit, raw: redisURL, interval: time.Second, now: time.Now})
	redisLogInstall.Do(func() { redis.SetLogger(redisLogForwarder{}) })
}

type redisLogForwarder struct{}

func (redisLogForwarder) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLogTarget.Load(); l != nil {
		l.Printf(ctx, format, v...)
	}
}
