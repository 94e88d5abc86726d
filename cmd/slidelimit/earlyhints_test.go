package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An upstream's 103 Early Hints goes to the client without the RateLimit fields, and the final
// response carries them: the reverse proxy sent the 103 with every header set so far and then
// cleared them, so the fields went on the 103 and the final 200 had none (and the access log
// said status=103).
func TestProxyEarlyHintsKeepFieldsForTheFinalResponse(t *testing.T) {
	early := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("X-Final", "yes")
		_, _ = w.Write([]byte("final"))
	}))
	t.Cleanup(early.Close)
	p := startInProcess(t, w0, "-upstream", early.URL, "-limit", "3", "-window", "10s", "-log-admitted", "1")
	var hints []textproto.MIMEHeader
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, h)
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.srv.URL+"/", nil)
	require.NoError(t, err)
	res, err := p.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 200, res.StatusCode)
	assert.Equal(t, "yes", res.Header.Get("X-Final"))
	assert.Equal(t, `"default";q=3;w=10`, res.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"default";r=2;t=10`, res.Header.Get("RateLimit"))
	require.Len(t, hints, 1)
	assert.Equal(t, "</style.css>; rel=preload", hints[0].Get("Link"))
	assert.Empty(t, hints[0].Get("RateLimit"), "the 103 carries no quota")
	assert.Empty(t, hints[0].Get("RateLimit-Policy"))
	require.Eventually(t, func() bool { return strings.Contains(p.log.String(), "status=") }, failsafe, 10e6)
	assert.Contains(t, p.log.String(), "status=200")
	assert.NotContains(t, p.log.String(), "status=103")
}
