package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// MaxInlineSubject is the longest subject kept verbatim in a Redis key name; a longer one (or one
// starting with '#') is replaced by '#' and 32 hex digits of its SHA-256. Every process of a fleet
// must use the same value, which is why it is a constant.
const MaxInlineSubject = 128

// keyFor returns the Redis key of one (limiter, subject) pair under the policy whose
// fingerprint is pol (policyTag):
//
//	<prefix>{<16 hex digits>}<name>:<pol>:<subject>
//
// The hash tag comes first and is the only braced part Redis reads (it takes the first '{' and the
// first '}' after it), so whatever braces the subject contains, a cluster hashes the key by the tag
// alone. The tag is xxhash64 of the subject: the same in every process (a fleet must agree on the
// slot), spreading subjects over all slots, and never containing a brace. It leaves the limiter's
// name out so that every limiter's key for one subject is on one slot, where a single script can
// decide several limits at once (All). A collision of tags only puts two keys on one slot; it
// never merges their counters, because the key name keeps the subject itself.
//
// The policy's fingerprint in the name keeps a changed policy (another kind, another limit or
// window) from reading the state the old one wrote as its own: a GCRA arrival time read as a
// sliding window's count would refuse for the wrong reasons. After a change the limiter starts
// from new keys, and the old ones expire with their TTL. The name holds no ':' and the fingerprint
// is 8 hex digits, so the layout stays unambiguous.
//
// subject must come from shortSubject.
func keyFor(prefix, name, pol, subject string) string {
	var tag [16]byte
	h := strconv.AppendUint(tag[:0], xxhash.Sum64String(subject), 16)
	var b strings.Builder
	b.Grow(len(prefix) + 2 + 16 + len(name) + 1 + len(pol) + 1 + len(subject))
	b.WriteString(prefix)
	b.WriteByte('{')
	for range 16 - len(h) {
		b.WriteByte('0')
	}
	b.Write(h)
	b.WriteByte('}')
	b.WriteString(name)
	b.WriteByte(':')
	b.WriteString(pol)
	b.WriteByte(':')
	b.WriteString(subject)
	return b.String()
}

// shortSubject returns the subject as key names and the deny cache hold it: verbatim up to
// MaxInlineSubject bytes, else (or when it starts with '#') '#' and 32 hex digits of its SHA-256.
//
// Long subjects are hashed with SHA-256 rather than xxhash: subjects are often chosen by clients
// (a header, a path), and xxhash collisions can be constructed, which would let a client share,
// and exhaust, someone else's counter. The '#' marker keeps hashed names apart from verbatim ones,
// since a verbatim subject never starts with '#'. It also bounds what the deny cache keeps per
// refused key, whatever size of subject clients send.
func shortSubject(subject string) string {
	if len(subject) > MaxInlineSubject || strings.HasPrefix(subject, "#") {
		sum := sha256.Sum256([]byte(subject))
		return "#" + hex.EncodeToString(sum[:16])
	}
	return subject
}

// policyTag is the fingerprint of a policy's kind and parameters in key names: 8 hex digits of
// the SHA-256 of a canonical description.
func policyTag(desc string) string {
	sum := sha256.Sum256([]byte(desc))
	return hex.EncodeToString(sum[:4])
}
