package batched

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// maxInlineSubject is the longest subject kept verbatim in a key name; longer ones (and ones
// starting with '#') are replaced by '#' and 32 hex digits of their SHA-256. It matches
// redisstore.MaxInlineSubject, so that both modes name keys alike; every process of a fleet must
// use the same value.
const maxInlineSubject = 128

// stateKey returns the Redis key of one (limiter, subject) pair's fleet counts:
//
//	<prefix>{<16 hex digits>}<name>:<subject>
//
// The layout is redisstore's (the hash tag first and alone in braces, so a cluster hashes by it;
// the tag is xxhash64 of name and subject, the same in every process; long or '#'-led subjects are
// hashed with SHA-256, which clients cannot aim collisions at). The two modes keep different
// state under these names, which is why the default prefixes differ: the package writes its own
// copy of the layout rather than reaching into redisstore's unexported one.
func stateKey(prefix, name, subject string) string {
	if len(subject) > maxInlineSubject || strings.HasPrefix(subject, "#") {
		sum := sha256.Sum256([]byte(subject))
		subject = "#" + hex.EncodeToString(sum[:16])
	}
	d := xxhash.New()
	_, _ = d.WriteString(name)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(subject)
	var tag [16]byte
	h := strconv.AppendUint(tag[:0], d.Sum64(), 16)
	var b strings.Builder
	b.Grow(len(prefix) + 2 + 16 + len(name) + 1 + len(subject))
	b.WriteString(prefix)
	b.WriteByte('{')
	for range 16 - len(h) {
		b.WriteByte('0')
	}
	b.Write(h)
	b.WriteByte('}')
	b.WriteString(name)
	b.WriteByte(':')
	b.WriteString(subject)
	return b.String()
}

// membersKey is the sorted set of live process ids scored by their last heartbeat (ms), and
// epochKey the token that tells a process whether Redis lost its data since the last heartbeat.
// Both carry the same hash tag, so one script touches them on a cluster.
func membersKey(prefix, name string) string { return prefix + "{" + name + "}:members" }
func epochKey(prefix, name string) string   { return prefix + "{" + name + "}:epoch" }
