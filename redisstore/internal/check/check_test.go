package check

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestName(t *testing.T) {
	for _, c := range []struct {
		v        string
		isPrefix bool
		want     string // "" for valid
	}{
		{"api", false, ""},
		{"sl:", true, ""},
		{"", true, ""},
		{"", false, "name is empty"},
		{"a:b", false, `contains ':'`},
		{"a b", true, `contains ' '`},
		{"a{b", false, `contains '{'`},
		{strings.Repeat("x", 65), false, "longer than 64 bytes"},
		{"é", false, `contains 'é'`},
		{"a\xff", false, "contains byte 0xff"},
	} {
		err := Name("pkg", "name", c.v, c.isPrefix, 64)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Name(%q) = %v, want nil", c.v, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "pkg: ")):
			t.Errorf("Name(%q) = %v, want an error with %q", c.v, err, c.want)
		}
	}
}

func TestClient(t *testing.T) {
	ok := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer ok.Close()
	if err := Client("pkg", ok, 50*time.Millisecond); err != nil {
		t.Errorf("a client that honours deadlines was refused: %v", err)
	}
	slow := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer slow.Close()
	if err := Client("pkg", slow, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Errorf("a client that ignores deadlines: %v, want an error naming ContextTimeoutEnabled", err)
	}
	// -1 is "no timeout of its own" (the context's still applies); -2, or another negative
	// duration, sets no socket deadline at all, the context's included.
	minusOne := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1})
	defer minusOne.Close()
	if err := Client("pkg", minusOne, 50*time.Millisecond); err != nil {
		t.Errorf("ReadTimeout -1 with ContextTimeoutEnabled was refused: %v", err)
	}
	for _, o := range []*redis.Options{
		{ReadTimeout: -2, WriteTimeout: -1},
		{ReadTimeout: -1, WriteTimeout: -2},
		{ReadTimeout: -time.Second},
		{WriteTimeout: -time.Second},
	} {
		o.Addr, o.ContextTimeoutEnabled = "127.0.0.1:1", true
		c := redis.NewClient(o)
		if err := Client("pkg", c, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no socket deadline") {
			t.Errorf("ReadTimeout %v, WriteTimeout %v: %v, want an error saying no socket deadline is set", o.ReadTimeout, o.WriteTimeout, err)
		}
		c.Close()
	}
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: -2})
	defer cl.Close()
	if err := Client("pkg", cl, 50*time.Millisecond); err == nil {
		t.Error("a cluster client with ReadTimeout -2 was accepted")
	}
}

func TestIsNil(t *testing.T) {
	var typed *redis.Client
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if !IsNil(nil) || !IsNil(typed) || IsNil(c) {
		t.Fatalf("IsNil: nil %v, typed nil %v, client %v", IsNil(nil), IsNil(typed), IsNil(c))
	}
}
