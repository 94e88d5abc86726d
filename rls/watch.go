package rls

import (
	"context"
	"crypto/sha256"
	"strings"
	"time"
)

// Watch polls path (as given to LoadConfig) every interval (default 1s) until ctx ends or the
// server is closed (it returns within an interval of Close), and applies each change once the
// files have stayed the same for one interval (so within two intervals of the edit): a config
// that loads replaces the server's (see Reload); one that does not is logged with its reason,
// and the last good config stays in use until the files change again. Only the files LoadConfig
// reads are watched. A config read from path and applied by other means (ReloadFile, the
// command's SIGHUP, or Reload of a LoadConfig(path)) is where Watch goes on from: if path no
// longer holds what that config was read from, Watch applies the files, as it applies any edit.
// Polling rather than file events works the same on every filesystem, and for Kubernetes
// ConfigMaps, whose files are swapped by renaming a symbolic link. Watch blocks; run it in its own
// goroutine. Safe to run alongside calls.
func (s *Server) Watch(ctx context.Context, path string, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	// Start from what the current config was read from, so that an edit made between its
	// loading and this call is applied rather than taken as the starting point.
	last := fingerprint(path)
	var applied [32]byte // the fingerprint of the config in use, when it came from path
	if cfg := s.Config(); cfg != nil && cfg.source == path {
		last, applied = cfg.fp, cfg.fp
	}
	pending := last
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cfg := s.Config()
		if cfg == nil {
			return // closed: nothing left to reload, and polling on would outlive the server
		}
		if cfg.source == path && cfg.fp != applied {
			// path was loaded since the last poll, by the reload below or by ReloadFile (the
			// command's SIGHUP): what was read is where this goes on from, so an edit made
			// between a poll and the read is not loaded a second time, and one made during the
			// read is seen now.
			last, pending, applied = cfg.fp, cfg.fp, cfg.fp
		}
		fp := fingerprint(path)
		if fp == last {
			pending = last
			continue
		}
		if fp != pending {
			// Changed since the previous poll: wait until it holds still for one interval, so
			// that a file caught half-written is not loaded.
			pending = fp
			continue
		}
		// fp was taken before the files are read, so an edit made while they are read is seen
		// at the next poll.
		last = fp
		_ = s.ReloadFile(path) // logged and counted; the last good config stays on an error
	}
}

// ReloadFile loads the config at path (see LoadConfig) and applies it (see Reload) at once, for a
// reload on demand (the command's SIGHUP), and counts and logs the outcome as Watch does. On an
// error, which it returns, the last good config stays in use. Safe to call alongside calls, Watch
// and itself.
func (s *Server) ReloadFile(path string) error {
	cfg, err := LoadConfig(path)
	if err == nil {
		err = s.Reload(cfg)
	}
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		s.logger.Printf("config change in %s not applied, keeping the last good config: %v", path, err)
		return err
	}
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.logger.Printf("config reloaded from %s: domains %s", path, strings.Join(cfg.Domains(), ", "))
	return nil
}

// fingerprint hashes the names and contents of the files LoadConfig would read, so that any
// change, including a file added or removed, is seen whatever the timestamps say. Files that
// LoadConfig skips are not read (an editor's swap file, a FIFO that would block the poll); a
// path that does not load hashes as its error, so that fixing it is a change.
func fingerprint(path string) [32]byte {
	h := sha256.New()
	files, err := configFiles(path)
	if err != nil {
		h.Write([]byte("error: " + err.Error()))
	}
	for _, f := range files {
		data, err := readConfigFile(f)
		h.Write([]byte(f))
		h.Write([]byte{0})
		if err != nil {
			h.Write([]byte("\x00error: " + err.Error()))
		}
		h.Write(data)
		h.Write([]byte{0})
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
