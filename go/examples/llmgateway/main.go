// An OpenAI-compatible gateway in front of an LLM, on this package's token budgets: each
// POST /v1/chat/completions takes one request of the caller's request limit exactly and holds an
// estimate of its tokens (a rough count of the prompt + max_tokens) with Limiter.Hold, in one atomic
// call; the upstream's answer settles the hold with usage.total_tokens, so the caller is charged
// what the model used, not the estimate. Every answer carries the headers OpenAI's clients read
// (x-ratelimit-{limit,remaining,reset}-{requests,tokens}, RateLimit-Policy, RateLimit:
// httplimit.LLMHeaders), and a request whose estimate does not fit gets 429 with them.
//
// `go run ./examples/llmgateway` with REDIS_ADDR set (a server with the module, or a stock one: the
// library is loaded by itself) runs a fake local upstream and the gateway, sends a few requests and
// prints what they met. With LISTEN set (say 127.0.0.1:8080) it serves the gateway there instead,
// in front of UPSTREAM (an OpenAI-compatible base URL; default the fake one).
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/httplimit"
	"github.com/redis/go-redis/v9"
)

// Gateway is the /v1/chat/completions handler. Limiter, Upstream, Requests and Tokens are required.
type Gateway struct {
	Limiter *ratelimit.Limiter
	// Upstream is the OpenAI-compatible API's base URL (its /v1/chat/completions is called).
	Upstream string
	Client   *http.Client // default http.DefaultClient
	// Requests is each caller's request limit (charged exactly, 1 a request); Tokens its token
	// budget (held at the estimate, settled at the usage). A fixed window or a sliding counter reads
	// as OpenAI's per-minute limits do; a token bucket works too.
	Requests, Tokens ratelimit.Policy
	// DefaultMaxTokens is the estimate's completion part when a request names no max_tokens.
	DefaultMaxTokens uint64
	// Prefix starts every key (default "rl"): <prefix>:{user:<api key>}:llm-tokens:<kind>, ...
	Prefix string
	// HoldTTL is how long a hold lives unsettled (default ratelimit.DefaultHoldTTL).
	HoldTTL time.Duration
}

// chatRequest is what the gateway reads of a request; the upstream gets the body as sent.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"` // a string, or a list of parts ({"type":"text","text":...})
	} `json:"messages"`
	MaxTokens           *uint64 `json:"max_tokens"`
	MaxCompletionTokens *uint64 `json:"max_completion_tokens"`
	Stream              bool    `json:"stream"`
}

// usage is an OpenAI-style answer's usage.
type usage struct {
	PromptTokens     uint64 `json:"prompt_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`
	TotalTokens      uint64 `json:"total_tokens"`
}

// promptTokens is a rough count of a prompt's tokens: about 4 bytes of text a token, plus a few a
// message for its framing (OpenAI's own rule of thumb). A tokenizer would be closer; the settle
// corrects whatever the estimate missed.
func promptTokens(req chatRequest) uint64 {
	n := uint64(3)
	for _, m := range req.Messages {
		text := 0
		var s string
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &s) == nil {
			text = len(s)
		} else if json.Unmarshal(m.Content, &parts) == nil {
			for _, p := range parts {
				text += len(p.Text)
			}
		}
		n += 4 + uint64(text+3)/4
	}
	return n
}

// Estimate is what a request holds: its prompt's rough count + its max_tokens (or the default).
func (g *Gateway) Estimate(req chatRequest) uint64 {
	out := g.DefaultMaxTokens
	if req.MaxCompletionTokens != nil {
		out = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		out = *req.MaxTokens
	}
	return promptTokens(req) + out
}

// Keys are a caller's request and token keys (the contract's limit keys under the caller's tag,
// so that both share its hash tag, and the hold's ledger with them).
func (g *Gateway) Keys(apiKey string) (requests, tokens string) {
	prefix := g.Prefix
	if prefix == "" {
		prefix = "rl"
	}
	tag := httplimit.Principal(apiKey).Tag(prefix)
	return ratelimit.LimitKey(tag, "llm-requests", g.Requests), ratelimit.LimitKey(tag, "llm-tokens", g.Tokens)
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		openAIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
		return
	}
	apiKey, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || apiKey == "" {
		openAIError(w, http.StatusUnauthorized, "invalid_request_error", "no API key (Authorization: Bearer ...)")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20))
	if err != nil {
		openAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "the request body is too large")
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "the body is not a chat completion request: "+err.Error())
		return
	}
	if req.Stream {
		// A stream's usage comes in its last chunk (stream_options.include_usage): Hold.Add with
		// the running total as chunks come, Settle at the end. Not in this example.
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "this gateway does not stream")
		return
	}
	ctx := r.Context()
	reqKey, tokKey := g.Keys(apiKey)
	estimate := g.Estimate(req)
	ttl := g.HoldTTL
	if ttl == 0 {
		ttl = ratelimit.DefaultHoldTTL
	}
	hold, err := g.Limiter.Hold(ctx, ratelimit.HoldOptions{TTL: ttl},
		ratelimit.ExactLimit(reqKey, g.Requests, 1), // a request is a request: charged, never settled
		ratelimit.HeldLimit(tokKey, g.Tokens, estimate))
	if err != nil {
		openAIError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	d := hold.Decision
	if !d.Allowed {
		g.denied(w, r, d, reqKey, tokKey, estimate)
		return
	}
	// Left unsettled (a panic, the caller gone mid-call), Close applies the hold's abandon policy:
	// CHARGE, the default, keeps the estimate charged (billing-safe). Settles and Close outlive the
	// caller's context by themselves (the limiter sends them without its cancel).
	defer func() { _ = hold.Close(ctx) }()

	status, header, answer, err := g.call(ctx, body)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left while the model worked: what it used is unknown, so nothing is settled
		// here and Close leaves the estimate charged.
		return
	case err != nil:
		_, _ = hold.Cancel(ctx) // the upstream never answered: nothing was used
		g.setHeaders(ctx, w.Header(), hold, reqKey, tokKey)
		openAIError(w, http.StatusBadGateway, "server_error", "the upstream did not answer: "+err.Error())
		return
	case status/100 != 2:
		_, _ = hold.Cancel(ctx) // an upstream error uses no tokens
	default:
		var out struct {
			Usage *usage `json:"usage"`
		}
		if json.Unmarshal(answer, &out) == nil && out.Usage != nil && out.Usage.TotalTokens > 0 {
			_, _ = hold.Settle(ctx, out.Usage.TotalTokens) // the unused part of the estimate goes back
		} else {
			_, _ = hold.Settle(ctx, estimate) // no usage: the estimate stays charged
		}
	}
	for _, name := range []string{"Content-Type", "X-Request-Id", "Openai-Processing-Ms"} {
		if v := header.Get(name); v != "" {
			w.Header().Set(name, v)
		}
	}
	g.setHeaders(ctx, w.Header(), hold, reqKey, tokKey)
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// call sends body to the upstream's /v1/chat/completions: its status, headers and body.
func (g *Gateway) call(ctx context.Context, body []byte) (int, http.Header, []byte, error) {
	client := g.Client
	if client == nil {
		client = http.DefaultClient
	}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(g.Upstream, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	up.Header.Set("Content-Type", "application/json")
	if key := os.Getenv("UPSTREAM_API_KEY"); key != "" {
		up.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(up)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, answer, nil
}

// denied answers a hold that was not allowed: 429 with the LLM headers (a denied hold took
// nothing: they show what is left), Retry-After when the request can fit later, and an OpenAI-style
// error whose type names the unit that refused it. Redis not deciding (the failure policy's denial)
// is 503.
func (g *Gateway) denied(w http.ResponseWriter, r *http.Request, d ratelimit.Decision, reqKey, tokKey string, estimate uint64) {
	retryAfter := ratelimit.HTTP().Headers.RetryAfter
	if d.Degraded {
		w.Header().Set(retryAfter, "1")
		openAIError(w, http.StatusServiceUnavailable, "server_error", "the rate limiter is unavailable: retry shortly")
		return
	}
	g.setHeaders(r.Context(), w.Header(), nil, reqKey, tokKey)
	unit, message := "tokens", fmt.Sprintf("token budget exceeded: this request holds %d tokens (its prompt + max_tokens), %d are left", estimate, d.Remaining)
	if d.Limiting == 0 {
		unit, message = "requests", fmt.Sprintf("request limit exceeded: %d requests allowed", d.Limit)
	}
	if secs, ok := d.RetryAfterSecs(); ok {
		w.Header().Set(retryAfter, strconv.FormatInt(secs, 10))
		message += fmt.Sprintf("; retry in %d s", secs)
	} else {
		message = fmt.Sprintf("this request holds %d tokens and the token limit is %d: it can never be allowed; lower max_tokens", estimate, d.Limit)
	}
	openAIError(w, http.StatusTooManyRequests, unit, message)
}

// setHeaders writes the LLM headers of both units as they stand now (RL.INSPECT, read-only: the
// state after this request's hold and settle). A hold Redis did not decide has none to show.
func (g *Gateway) setHeaders(ctx context.Context, h http.Header, hold *ratelimit.Hold, reqKey, tokKey string) {
	if hold.Local() {
		return
	}
	requests, tokens := g.budget(ctx, reqKey, g.Requests), g.budget(ctx, tokKey, g.Tokens)
	httplimit.LLMHeaders(h, requests, tokens)
}

func (g *Gateway) budget(ctx context.Context, key string, p ratelimit.Policy) *httplimit.Budget {
	in, err := g.Limiter.Peek(ctx, key, p)
	if err != nil {
		return nil // left out
	}
	b := httplimit.BudgetOfInspection(in, p)
	return &b
}

// openAIError writes an error as OpenAI's API does.
func openAIError(w http.ResponseWriter, status int, typ, message string) {
	code := any(nil)
	if status == http.StatusTooManyRequests {
		code = "rate_limit_exceeded"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
}

// FakeUpstream stands for the model: an OpenAI-style chat completion whose usage counts the
// prompt's words (plus 3 a message: its own tokenizer, not the gateway's estimate) and a fixed
// reply of at most max_tokens tokens. The model "fail" answers 500; the model "hang" answers
// nothing until its caller goes away (saying on Hung, when set, that it is hanging). Calls counts
// what it answered.
type FakeUpstream struct {
	Calls atomic.Int64
	Hung  chan struct{}
}

const fakeReply = "Hello! I am a fake model, and this is my whole answer."

func (f *FakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.Calls.Add(1)
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if req.Model == "fail" {
		openAIError(w, http.StatusInternalServerError, "server_error", "the model failed")
		return
	}
	if req.Model == "hang" {
		if f.Hung != nil {
			f.Hung <- struct{}{}
		}
		<-r.Context().Done()
		return
	}
	var u usage
	for _, m := range req.Messages {
		var s string
		_ = json.Unmarshal(m.Content, &s)
		u.PromptTokens += 3 + uint64(len(strings.Fields(s)))
	}
	words := strings.Fields(fakeReply)
	u.CompletionTokens = uint64(len(words)) + 2
	reply := fakeReply
	if req.MaxTokens != nil && *req.MaxTokens < u.CompletionTokens {
		u.CompletionTokens = *req.MaxTokens
		reply = strings.Join(words[:min(len(words), int(*req.MaxTokens))], " ")
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-fake-%d", f.Calls.Load()), "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": reply}}},
		"usage": u,
	})
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}

func main() {
	redis.SetLogger(quiet{})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	limiter, err := ratelimit.New(rdb, ratelimit.Options{Failure: ratelimit.FailClosed(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	v, err := limiter.Verify(ctx)
	if err != nil {
		fmt.Println("verify:", err)
		os.Exit(1)
	}
	fmt.Println("engine:", v.Engine)

	upstream := httptest.NewServer(&FakeUpstream{})
	defer upstream.Close()
	gw := &Gateway{Limiter: limiter, Upstream: upstream.URL, DefaultMaxTokens: 256,
		Requests: ratelimit.Must(ratelimit.FixedWindow(5, time.Minute)),     // 5 requests a minute
		Tokens:   ratelimit.Must(ratelimit.FixedWindow(1_000, time.Minute)), // 1,000 tokens a minute
	}
	if listen := os.Getenv("LISTEN"); listen != "" {
		if u := os.Getenv("UPSTREAM"); u != "" {
			gw.Upstream = u
		}
		mux := http.NewServeMux()
		mux.Handle("/v1/chat/completions", gw)
		fmt.Printf("gateway on http://%s/v1/chat/completions in front of %s\n", listen, gw.Upstream)
		if err := http.ListenAndServe(listen, mux); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		return
	}
	server := httptest.NewServer(gw)
	defer server.Close()

	// A fresh API key per run, so that each run starts with whole budgets.
	nonce := make([]byte, 6)
	_, _ = rand.Read(nonce)
	apiKey := "sk-demo-" + hex.EncodeToString(nonce)
	for i, maxTokens := range []uint64{300, 300, 950, 5_000, 100} {
		body := fmt.Sprintf(`{"model":"fake","max_tokens":%d,"messages":[{"role":"user","content":"Say hello to the gateway, please."}]}`, maxTokens)
		req, _ := http.NewRequest(http.MethodPost, server.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("request:", err)
			os.Exit(1)
		}
		var answer struct {
			Usage *usage `json:"usage"`
			Error *struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		err = errors.Join(json.NewDecoder(resp.Body).Decode(&answer), resp.Body.Close())
		if err != nil {
			fmt.Println("answer:", err)
			os.Exit(1)
		}
		h := resp.Header
		what := ""
		if answer.Usage != nil {
			what = fmt.Sprintf("used %d tokens", answer.Usage.TotalTokens)
		} else if answer.Error != nil {
			what = "refused (" + answer.Error.Type + ")"
			if ra := h.Get("Retry-After"); ra != "" {
				what += ", retry after " + ra + " s"
			}
		}
		fmt.Printf("request %d (max_tokens %d): %d, %s; requests left %s, tokens left %s of %s\n", i+1, maxTokens, resp.StatusCode, what,
			h.Get("x-ratelimit-remaining-requests"), h.Get("x-ratelimit-remaining-tokens"), h.Get("x-ratelimit-limit-tokens"))
	}
}
