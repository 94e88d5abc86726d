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

// space is the part of every key name that says whose counts they are: the limiter's name and its
// window in ms, "<name>:w<window>". A count means something only under the window it was kept
// for, so processes that share a name but not a window (a rolling deploy that changes it, or a
// misconfigured one) keep apart counts and memberships instead of misreading each other's. A
// limit differs in no key: processes with different limits share one count, and each holds it to
// its own limit. Names cannot contain ':', so no name's space is another's.
func space(name string, windowMs int64) string { return name + ":w" + strconv.FormatInt(windowMs, 10) }

// stateKey returns the Redis key of one (limiter, subject) pair's fleet counts:
//
//	<prefix>{<16 hex digits>}<name>:w<window ms>:<subject>
//
// The layout is redisstore's (the hash tag first and alone in braces, so a cluster hashes by it;
// the tag is xxhash64 of name and subject, the same in every process; long or '#'-led subjects are
// hashed with SHA-256, which clients cannot aim collisions at). The two modes keep different
// state under these names, which is why the default prefixes differ: the package writes its own
// copy of the layout rather than reaching into redisstore's unexported one. sp is the limiter's
// space (see space); the tag hashes it with the subject.
func stateKey(prefix, sp, subject string) string {
	if len(subject) > maxInlineSubject || strings.HasPrefix(subject, "#") {
		sum := sha256.Sum256([]byte(subject))
		subject = "#" + hex.EncodeToString(sum[:16])
	}
	d := xxhash.New()
	_, _ = d.WriteString(sp)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(subject)
	var tag [16]byte
	h := strconv.AppendUint(tag[:0], d.Sum64(), 16)
	var b strings.Builder
	b.Grow(len(prefix) + 2 + 16 + len(sp) + 1 + len(subject))
	b.WriteString(prefix)
	b.WriteByte('{')
	for range 16 - len(h) {
		b.WriteByte('0')
	}
	b.Write(h)
	b.WriteByte('}')
	b.WriteString(sp)
	b.WriteByte(':')
	b.WriteString(subject)
	return b.String()
}

// membersKey is the sorted set of live process ids scored by when their liveness ends (ms: their
// last heartbeat plus their own liveness),
// epochKey the token that tells a process whether Redis lost its data since the last heartbeat,
// and quietKey when the quiet after such a loss ends, for processes that did not know the old
// token. All carry the same hash tag, so one script touches them on a cluster.
func membersKey(prefix, sp string) string { return prefix + "{" + sp + "}:members" }
func epochKey(prefix, sp string) string   { return prefix + "{" + sp + "}:epoch" }
func quietKey(prefix, sp string) string   { return prefix + "{" + sp + "}:quiet" }

// withoutSubject is the key name rkey, from stateKey under space sp, with its subject (or the
// subject's hash) written as "…": errors go to logs, and a subject is a caller's key, which may be
// an address or an API key. The prefix holds no brace, so the first '}' closes the hash tag.
func withoutSubject(rkey, sp string) string {
	i := strings.IndexByte(rkey, '}')
	if i < 0 || len(rkey) < i+1+len(sp)+1 {
		return "…"
	}
	return rkey[:i+1+len(sp)+1] + "…"
}
