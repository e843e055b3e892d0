package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
)

// The gateway on a real redis-server with the module, over real HTTP (httptest servers for the
// gateway and the fake upstream).

type setup struct {
	gw       *Gateway
	url      string
	upstream *FakeUpstream
	limiter  *ratelimit.Limiter
}

func start(t *testing.T, requests, tokens uint64) setup {
	t.Helper()
	srv := redistest.Start(t, true)
	limiter, err := ratelimit.New(srv.Client(t), ratelimit.Options{Failure: ratelimit.FailClosed(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = limiter.Close() })
	fake := &FakeUpstream{}
	upstream := httptest.NewServer(fake)
	t.Cleanup(upstream.Close)
	gw := &Gateway{Limiter: limiter, Upstream: upstream.URL, DefaultMaxTokens: 256,
		Requests: ratelimit.Must(ratelimit.FixedWindow(requests, time.Hour)),
		Tokens:   ratelimit.Must(ratelimit.FixedWindow(tokens, time.Hour))}
	server := httptest.NewServer(gw)
	t.Cleanup(server.Close)
	return setup{gw: gw, url: server.URL, upstream: fake, limiter: limiter}
}

type answer struct {
	status int
	header http.Header
	Usage  *usage `json:"usage"`
	Error  *struct {
		Type string `json:"type"`
		Code string `json:"code"`
	} `json:"error"`
}

const prompt = "Say hello to the gateway, please."

func chat(model string, maxTokens uint64) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":%q}]}`, model, maxTokens, prompt)
}

func post(t *testing.T, s setup, apiKey, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
	}
	return a
}

// estimate is what the gateway holds for body.
func estimate(t *testing.T, s setup, body string) uint64 {
	t.Helper()
	var req chatRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	return s.gw.Estimate(req)
}

// left is what key has left in Redis (RL.INSPECT), independent of the headers.
func left(t *testing.T, s setup, key string, p ratelimit.Policy) uint64 {
	t.Helper()
	in, err := s.limiter.Peek(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Exists {
		return p.Limit()
	}
	return in.Remaining
}

var statePattern = regexp.MustCompile(`^"requests";r=(\d+);t=(\d+), "tokens";r=(\d+);t=(\d+)$`)

// checkHeaders: the LLM headers of both units with these numbers, resets within the window, and
// the draft's fields saying the same.
func checkHeaders(t *testing.T, h http.Header, requestLimit, requestsLeft, tokenLimit, tokensLeft uint64) {
	t.Helper()
	want := map[string]string{
		"x-ratelimit-limit-requests": strconv.FormatUint(requestLimit, 10), "x-ratelimit-remaining-requests": strconv.FormatUint(requestsLeft, 10),
		"x-ratelimit-limit-tokens": strconv.FormatUint(tokenLimit, 10), "x-ratelimit-remaining-tokens": strconv.FormatUint(tokensLeft, 10),
		"ratelimit-policy": fmt.Sprintf(`"requests";q=%d;w=3600, "tokens";q=%d;w=3600`, requestLimit, tokenLimit),
	}
	for name, value := range want {
		if got := h.Values(name); len(got) != 1 || got[0] != value {
			t.Errorf("%s: %q, want %q", name, got, value)
		}
	}
	for _, name := range []string{"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"} {
		d, err := time.ParseDuration(h.Get(name))
		if err != nil || d <= 0 || d > time.Hour {
			t.Errorf("%s: %q, want a duration in (0, 1h] (%v)", name, h.Get(name), err)
		}
	}
	m := statePattern.FindStringSubmatch(h.Get("ratelimit"))
	if m == nil || m[1] != want["x-ratelimit-remaining-requests"] || m[3] != want["x-ratelimit-remaining-tokens"] {
		t.Errorf("ratelimit: %q, want the remaining requests and tokens of the other headers", h.Get("ratelimit"))
	}
}

func TestGatewayHoldsSettlesAndRefuses(t *testing.T) {
	const requestLimit, tokenLimit = 4, 1000
	s := start(t, requestLimit, tokenLimit)
	const key = "sk-test-ada"
	reqKey, tokKey := s.gw.Keys(key)

	// Two calls: each holds its estimate, settles its usage; the headers show the usage charged.
	tokensLeft := uint64(tokenLimit)
	for i := 1; i <= 2; i++ {
		body := chat("fake", 300)
		est := estimate(t, s, body)
		a := post(t, s, key, body)
		if a.status != http.StatusOK || a.Usage == nil {
			t.Fatalf("call %d: %d, usage %v", i, a.status, a.Usage)
		}
		used := a.Usage.TotalTokens
		if used == 0 || used >= est {
			t.Fatalf("call %d: usage %d, estimate %d: the test needs an estimate above the usage", i, used, est)
		}
		tokensLeft -= used // by the usage, not the estimate
		checkHeaders(t, a.header, requestLimit, requestLimit-uint64(i), tokenLimit, tokensLeft)
		if got := left(t, s, tokKey, s.gw.Tokens); got != tokensLeft {
			t.Fatalf("call %d: Redis holds %d tokens left, want %d (the limit less the usage)", i, got, tokensLeft)
		}
	}
	if s.upstream.Calls.Load() != 2 {
		t.Fatalf("upstream called %d times, want 2", s.upstream.Calls.Load())
	}

	// An estimate that fit at first but no longer does: 429 with the headers, Retry-After, nothing
	// taken (neither a token nor the request), the upstream not called.
	body := chat("fake", tokensLeft+1-estimate(t, s, chat("fake", 0))) // one token more than is left
	if est := estimate(t, s, body); est <= tokensLeft || est > tokenLimit {
		t.Fatalf("estimate %d: want one above the %d left and within the limit %d", est, tokensLeft, tokenLimit)
	}
	a := post(t, s, key, body)
	if a.status != http.StatusTooManyRequests || a.Error == nil || a.Error.Type != "tokens" || a.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("a hold that does not fit: %d %+v", a.status, a.Error)
	}
	checkHeaders(t, a.header, requestLimit, requestLimit-2, tokenLimit, tokensLeft)
	if ra, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || ra < 1 || ra > 3600 {
		t.Fatalf("Retry-After %q, want whole seconds within the window", a.header.Get("Retry-After"))
	}
	if got := left(t, s, reqKey, s.gw.Requests); got != requestLimit-2 {
		t.Fatalf("a denied hold took a request: %d left, want %d", got, requestLimit-2)
	}

	// One that can never fit: 429 without Retry-After.
	a = post(t, s, key, chat("fake", 5*tokenLimit))
	if a.status != http.StatusTooManyRequests || a.Error == nil || a.header.Get("Retry-After") != "" {
		t.Fatalf("a hold above the limit: %d %+v, Retry-After %q", a.status, a.Error, a.header.Get("Retry-After"))
	}
	checkHeaders(t, a.header, requestLimit, requestLimit-2, tokenLimit, tokensLeft)
	if s.upstream.Calls.Load() != 2 {
		t.Fatalf("a refused request reached the upstream (%d calls)", s.upstream.Calls.Load())
	}

	// The request limit, charged exactly: two more pass, the next is refused as "requests".
	for i := 3; i <= requestLimit; i++ {
		a = post(t, s, key, chat("fake", 50))
		if a.status != http.StatusOK {
			t.Fatalf("call %d: %d", i, a.status)
		}
		tokensLeft -= a.Usage.TotalTokens
		checkHeaders(t, a.header, requestLimit, requestLimit-uint64(i), tokenLimit, tokensLeft)
	}
	a = post(t, s, key, chat("fake", 50))
	if a.status != http.StatusTooManyRequests || a.Error == nil || a.Error.Type != "requests" || a.header.Get("Retry-After") == "" {
		t.Fatalf("past the request limit: %d %+v", a.status, a.Error)
	}
	checkHeaders(t, a.header, requestLimit, 0, tokenLimit, tokensLeft)

	// Another API key has its own budgets.
	a = post(t, s, "sk-test-grace", chat("fake", 300))
	if a.status != http.StatusOK {
		t.Fatalf("another key: %d", a.status)
	}
	checkHeaders(t, a.header, requestLimit, requestLimit-1, tokenLimit, tokenLimit-a.Usage.TotalTokens)
}

// An upstream error uses no tokens: the hold is cancelled (the request stays counted).
func TestGatewayUpstreamErrorGivesTheTokensBack(t *testing.T) {
	s := start(t, 10, 1000)
	const key = "sk-test-fail"
	a := post(t, s, key, chat("fail", 300))
	if a.status != http.StatusInternalServerError {
		t.Fatalf("the upstream's 500: %d", a.status)
	}
	checkHeaders(t, a.header, 10, 9, 1000, 1000)
	_, tokKey := s.gw.Keys(key)
	if got := left(t, s, tokKey, s.gw.Tokens); got != 1000 {
		t.Fatalf("%d tokens left after a failed call, want 1000", got)
	}
}

// The program itself (`go run .`) on a module server prints the expected lines.
func TestDemo(t *testing.T) {
	want, err := os.ReadFile("expected.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t, true)
	cmd := exec.Command("go", "run", ".")
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := append(strings.Split(strings.TrimSpace(string(want)), "\n"), "engine: the ratelimit module")
	for _, line := range lines {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no line %q in\n%s", line, out.String())
		}
	}
}

// A caller that goes away while the model works: the gateway settles nothing by hand, and the
// hold's Close (on the request's context, cancelled by then) leaves the estimate charged: the
// abandon policy (CHARGE), not a refund of tokens the model may have billed.
func TestGatewayCallerGoneKeepsTheEstimateCharged(t *testing.T) {
	s := start(t, 10, 1000)
	s.upstream.Hung = make(chan struct{})
	handled := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handled) // after the handler's deferred Close
		s.gw.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	const key = "sk-test-gone"
	body := chat("hang", 300)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	sent := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	<-s.upstream.Hung // the hold is taken and the model is working
	cancel()          // the client goes away
	if err := <-sent; err == nil {
		t.Fatal("the request was answered, want it abandoned")
	}
	<-handled
	reqKey, tokKey := s.gw.Keys(key)
	if got, want := left(t, s, tokKey, s.gw.Tokens), 1000-estimate(t, s, body); got != want {
		t.Fatalf("%d tokens left after the caller left mid-call, want %d (the estimate charged)", got, want)
	}
	if got := left(t, s, reqKey, s.gw.Requests); got != 9 {
		t.Fatalf("%d requests left, want 9", got)
	}
}
