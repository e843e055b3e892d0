package ratelimit

import (
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The contract every client reads (contract/contract.json, written by the Rust reference): kinds,
// commands and their key rules, bounds, error texts, the library's functions and where their EVALSHA scripts are,
// the HTTP names and problem texts, the commands of the calls beside the decisions. Nothing in this package restates a rule: this file reads the file and interprets
// its key rules.

//go:embed contract.json
var contractJSON []byte

//go:embed ratelimit.lua
var librarySource string

// The library's EVALSHA scripts, one per function (the repository's lua/scripts/).
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// ContractJSON is the embedded contract, as the repository's contract/contract.json.
func ContractJSON() []byte { return contractJSON }

// LibrarySource is the Lua library as FUNCTION LOAD takes it (the repository's lua/ratelimit.lua).
func LibrarySource() string { return librarySource }

type contractParam struct {
	Name   string `json:"name"`
	Errors []struct {
		Expected string `json:"expected"`
		Field    string `json:"field"`
	} `json:"errors"`
}

type kindDecl struct {
	Name     string          `json:"name"`
	Group    string          `json:"group"`
	Command  string          `json:"command"`
	Function string          `json:"function"`
	Request  string          `json:"request"`
	Owner    string          `json:"owner"`
	Refunds  bool            `json:"refunds"`
	Peeks    bool            `json:"peeks"`
	Params   []contractParam `json:"params"`
	// Fallback is how the local fallback decides it: token_bucket or leases.
	Fallback string `json:"fallback"`
}

type keyRule struct {
	Rule  string `json:"rule"`
	Index int    `json:"index"`
	Step  int    `json:"step"`
	// GroupsFrom (ledger_groups): where RL.ALL's groups start, after the ledger (key 0) and the
	// words before them; PairsFrom (ledger_pairs): where the key/units pairs start.
	GroupsFrom int `json:"groups_from"`
	PairsFrom  int `json:"pairs_from"`
}

type commandDecl struct {
	Name     string  `json:"name"`
	Function *string `json:"function"`
	Keys     keyRule `json:"keys"`
	Writes   bool    `json:"writes"`
}

type requestForm struct {
	Args   []string `json:"args"`
	Option *struct {
		Word   string `json:"word"`
		Values int    `json:"values"`
	} `json:"option"`
}

type libraryFunction struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	SHA1     string `json:"evalsha_sha1"`
	ReadOnly bool   `json:"read_only"`
}

type contractDoc struct {
	Version int `json:"version"`
	Bounds  struct {
		MaxDecimalDigits   int    `json:"max_decimal_digits"`
		MaxDecimalExponent int    `json:"max_decimal_exponent"`
		MaxHorizonSecs     uint64 `json:"max_horizon_secs"`
		MaxLeaseLimit      uint64 `json:"max_lease_limit"`
		MaxLeaseWeight     uint64 `json:"max_lease_weight"`
		MaxLogLimit        uint64 `json:"max_log_limit"`
		MaxRatePerSec      uint64 `json:"max_rate_per_sec"`
		MaxWhole           uint64 `json:"max_whole"`
	} `json:"bounds"`
	Commands []commandDecl `json:"commands"`
	Errors   struct {
		Format       string            `json:"format"`
		OutOfRange   string            `json:"out_of_range"`
		TooLarge     string            `json:"too_large"`
		Render       map[string]string `json:"render"`
		Syntax       string            `json:"syntax"`
		State        string            `json:"state"`
		DuplicateKey string            `json:"duplicate_key"`
		Requests     []struct {
			Field string `json:"field"`
			Reply string `json:"reply"`
		} `json:"requests"`
	} `json:"errors"`
	Replies      repliesDecl            `json:"replies"`
	Engines      enginesDecl            `json:"engines"`
	Kinds        []kindDecl             `json:"kinds"`
	RequestForms map[string]requestForm `json:"request_forms"`
	Library      struct {
		Name    string `json:"name"`
		Evalsha struct {
			Scripts string `json:"scripts"`
		} `json:"evalsha"`
		Functions  []libraryFunction `json:"functions"`
		SourceSHA1 string            `json:"source_sha1"`
	} `json:"library"`
	HTTP     HTTPContract `json:"http"`
	Batching batchingDecl `json:"batching"`
	// Calls are the commands a client sends beside its decisions, as words with placeholders.
	Calls    map[string][]string `json:"calls"`
	Fallback struct {
		MaxKeys int `json:"max_keys"`
	} `json:"fallback"`
	Holds holdsDecl `json:"holds"`
}

// holdsDecl is the contract's "holds": RL.HOLD's and RL.SETTLE's words, bounds, the default
// ledger's template and the error texts of a hold.
type holdsDecl struct {
	Abandon        []string `json:"abandon"`
	AbandonDefault string   `json:"abandon_default"`
	Calls          struct {
		Hold   []string `json:"hold"`
		Settle []string `json:"settle"`
	} `json:"calls"`
	Errors []struct {
		Field string `json:"field"`
		Reply string `json:"reply"`
	} `json:"errors"`
	HeldKinds  []string `json:"held_kinds"`
	Ledger     string   `json:"ledger"`
	MaxIDBytes int      `json:"max_id_bytes"`
	MaxTTLSecs int64    `json:"max_ttl_secs"`
	Modes      []string `json:"modes"` // FINAL, PARTIAL
	// TTLDefaultSecs is a hold's ttl when the caller names none (DefaultHoldTTL).
	TTLDefaultSecs int64 `json:"ttl_default_secs"`
}

// holdCall is the contract's hold call ("hold" or "settle") with its placeholders replaced.
func holdCall(name string, values map[string]string) []string {
	template := map[string][]string{"hold": contract.Holds.Calls.Hold, "settle": contract.Holds.Calls.Settle}[name]
	if template == nil {
		panic("redis-ratelimit: the contract has no hold call " + name)
	}
	return fill(name, template, values)
}

// holdError is the contract's error reply of a hold's field (ttl, id, key, ledger).
func holdError(field string) string {
	for _, e := range contract.Holds.Errors {
		if e.Field == field {
			return e.Reply
		}
	}
	panic("redis-ratelimit: the contract has no hold error for " + field)
}

// holdMode is a settle's word: FINAL (final true) or PARTIAL, the contract's modes in its
// syntax's order (FINAL|PARTIAL).
func holdMode(final bool) string {
	if final {
		return contract.Holds.Modes[0]
	}
	return contract.Holds.Modes[1]
}

// ledgerOf is the default ledger of a hold whose first key is key: the contract's template
// ({{ and }} are braces, {tag} the key's hash tag, or the whole key when it has none).
func ledgerOf(key string) string {
	tag := key
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			tag = key[open+1 : open+1+end]
		}
	}
	var out strings.Builder
	t := contract.Holds.Ledger
	for i := 0; i < len(t); i++ {
		switch {
		case strings.HasPrefix(t[i:], "{{"), strings.HasPrefix(t[i:], "}}"):
			out.WriteByte(t[i])
			i++
		case strings.HasPrefix(t[i:], "{tag}"):
			out.WriteString(tag)
			i += len("{tag}") - 1
		default:
			out.WriteByte(t[i])
		}
	}
	return out.String()
}

// batchingDecl is the contract's "batching": the adaptive size's numbers, the refund margin, the
// sweep, the most states a limiter keeps, the default lease, and where each kind's window ends
// ("none", "reset", "reset_minus_window"; a kind missing here cannot batch).
type batchingDecl struct {
	Start          uint64            `json:"start"`
	Ahead          uint64            `json:"ahead"`
	Grow           uint64            `json:"grow"`
	Share          uint64            `json:"share"`
	RefundMarginMs int64             `json:"refund_margin_ms"`
	SweepMs        int64             `json:"sweep_ms"`
	MaxKeys        int               `json:"max_keys"`
	LeaseMs        int64             `json:"lease_ms"`
	Kinds          map[string]string `json:"kinds"`
	Errors         struct {
		Batch string `json:"batch"` // a batch out of bounds
		Lease string `json:"lease"` // a lease out of bounds
		Kind  string `json:"kind"`  // a kind that cannot batch ({kind} its name)
	} `json:"errors"`
}

// HTTPContract is the contract's "http" member: header names, problem types and texts, caller keys and
// forwarding bounds, read by the httplimit package.
type HTTPContract struct {
	Caller struct {
		Escapes           map[string]string `json:"escapes"`
		IPv6PrefixDefault int               `json:"ipv6_prefix_default"`
		MaxPartBytes      int               `json:"max_part_bytes"`
		// Markers: what follows the kind in a key part ("plain", "escaped", "hashed").
		Markers struct {
			Plain   string `json:"plain"`
			Escaped string `json:"escaped"`
			Hashed  string `json:"hashed"`
		} `json:"markers"`
	} `json:"caller"`
	DegradedValue string `json:"degraded_value"`
	// LimitKey is the key of a limit an HTTP layer or adapter names: "{tag}:{name}:{owner}", the
	// caller's tag, the limit's name and its kind's owner (LimitKey formats it).
	LimitKey  string `json:"limit_key"`
	Forwarded struct {
		MaxHops      int `json:"max_hops"`
		MaxNodeBytes int `json:"max_node_bytes"`
	} `json:"forwarded"`
	Headers struct {
		ContentType string `json:"content_type"`
		Degraded    string `json:"degraded"`
		Limit       string `json:"limit"`
		Policy      string `json:"policy"`
		Remaining   string `json:"remaining"`
		Reset       string `json:"reset"`
		RetryAfter  string `json:"retry_after"`
		State       string `json:"state"`
	} `json:"headers"`
	ProblemTypes struct {
		ConcurrencyLimited string `json:"concurrency_limited"`
		CostExceedsLimit   string `json:"cost_exceeds_limit"`
		Denied             string `json:"denied"`
		Misconfigured      string `json:"misconfigured"`
		RateLimited        string `json:"rate_limited"`
		Unavailable        string `json:"unavailable"`
	} `json:"problem_types"`
	Structured struct {
		NameDrops []string `json:"name_drops"`
		Policy    string   `json:"policy"`
		State     string   `json:"state"`
	} `json:"structured"`
	// Problems are the problem bodies' texts, by their types' names.
	Problems struct {
		ConcurrencyLimited Problem `json:"concurrency_limited"`
		CostExceedsLimit   Problem `json:"cost_exceeds_limit"`
		Denied             Problem `json:"denied"`
		Misconfigured      Problem `json:"misconfigured"`
		RateLimited        Problem `json:"rate_limited"`
		Unavailable        Problem `json:"unavailable"`
	} `json:"problems"`
	// ProblemWhat is what a detail's {what} calls a limit.
	ProblemWhat struct {
		Rate        string `json:"rate"`
		Concurrency string `json:"concurrency"`
	} `json:"problem_what"`
	// LLM is the rate limit headers LLM clients read (OpenAI's): Name, a template of {field} (each of
	// Fields: limit, remaining, reset, in that order) and {unit} (each of Units: requests, then
	// tokens); Duration says how a reset is written (Go's time.Duration form), Then what follows the
	// three of each unit (RateLimit-Policy and RateLimit, a policy per unit, as Structured writes them).
	LLM struct {
		Name     string   `json:"name"`
		Fields   []string `json:"fields"`
		Units    []string `json:"units"`
		Duration string   `json:"duration"`
		Then     string   `json:"then"`
	} `json:"llm"`
}

// Problem is a problem body's title and its detail, a template whose placeholders Fill replaces:
// {name} (the limit's), {what} (ProblemWhat's), {limit} (the decision's), {cost} (the request's),
// {retry_after_secs}.
type Problem struct {
	Title  string `json:"title"`
	Detail string `json:"detail"`
}

// Fill is the problem's detail with each {placeholder} that values names replaced, in one pass: a
// value is never read as a template (a limit may be named "{cost}").
func (p Problem) Fill(values map[string]string) string {
	var out strings.Builder
	rest := p.Detail
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			break
		}
		out.WriteString(rest[:open])
		after := rest[open+1:]
		if end := strings.IndexByte(after, '}'); end >= 0 {
			if v, ok := values[after[:end]]; ok {
				out.WriteString(v)
				rest = after[end+1:]
				continue
			}
		}
		out.WriteByte('{')
		rest = after
	}
	out.WriteString(rest)
	return out.String()
}

// call is the contract's call name ("take", "refund", "renew", ...: the commands a client sends
// beside its decisions) with each "{placeholder}" word replaced by its value in values.
func call(name string, values map[string]string) []string {
	template, ok := contract.Calls[name]
	if !ok {
		panic("redis-ratelimit: the contract has no call " + name)
	}
	return fill(name, template, values)
}

// fill is a call's template with each "{placeholder}" word replaced by its value in values.
func fill(name string, template []string, values map[string]string) []string {
	out := make([]string, len(template))
	for i, word := range template {
		if len(word) > 2 && word[0] == '{' && word[len(word)-1] == '}' {
			value, ok := values[word[1:len(word)-1]]
			if !ok {
				panic("redis-ratelimit: no value for " + word + " in the call " + name)
			}
			word = value
		}
		out[i] = word
	}
	return out
}

var (
	contract   contractDoc
	kinds      = map[string]*kindDecl{}
	byGroup    = map[string]*kindDecl{}
	commands   = map[string]*commandDecl{}
	functionOf = map[string]string{} // RL.TOKEN -> rl_token
)

func init() {
	if err := json.Unmarshal(contractJSON, &contract); err != nil {
		panic(fmt.Sprintf("redis-ratelimit: the embedded contract does not parse: %v", err))
	}
	if secs := contract.Holds.TTLDefaultSecs; secs <= 0 || secs > contract.Holds.MaxTTLSecs {
		panic(fmt.Sprintf("redis-ratelimit: the embedded contract's holds.ttl_default_secs is %d", secs))
	}
	DefaultHoldTTL = time.Duration(contract.Holds.TTLDefaultSecs) * time.Second
	for i := range contract.Kinds {
		k := &contract.Kinds[i]
		kinds[k.Name] = k
		byGroup[k.Group] = k
	}
	for i := range contract.Commands {
		c := &contract.Commands[i]
		commands[c.Name] = c
		if c.Function != nil {
			functionOf[c.Name] = *c.Function
		}
	}
	readScripts()
}

// HTTP is the contract's HTTP names (headers, problem types and texts, caller keys, forwarding bounds).
func HTTP() *HTTPContract { return &contract.HTTP }

func kindOf(name string) *kindDecl {
	k, ok := kinds[name]
	if !ok {
		panic("redis-ratelimit: the contract has no kind " + name)
	}
	return k
}

// paramError is what a kind's parameter must be: its index-th error text, in the order checked.
func paramError(kind, param string, index int) string {
	for _, p := range kindOf(kind).Params {
		if p.Name == param {
			return p.Errors[index].Expected
		}
	}
	panic("redis-ratelimit: the contract has no parameter " + kind + "." + param)
}

// requestLen is how many arguments at the start of rest a request of form takes.
func requestLen(form string, rest []string) int {
	spec := contract.RequestForms[form]
	if o := spec.Option; o != nil && len(rest) > 1 && strings.EqualFold(rest[1], o.Word) {
		return 2 + o.Values
	}
	return len(spec.Args)
}

// groupLen is how many arguments an RL.ALL group of group takes after its key and kind name; -1
// for a name that is no kind's group.
func groupLen(group string, rest []string) int {
	k, ok := byGroup[strings.ToUpper(group)]
	if !ok {
		return -1
	}
	var after []string
	if len(rest) > 2 {
		after = rest[2:]
	}
	return 2 + requestLen(k.Request, after)
}

// keyPositions is where a command's keys are among its arguments (after its name).
func keyPositions(name string, args []string) []int {
	c, ok := commands[strings.ToUpper(name)]
	if !ok {
		return nil
	}
	switch c.Keys.Rule {
	case "at":
		if c.Keys.Index < len(args) {
			return []int{c.Keys.Index}
		}
	case "every":
		var out []int
		for i := 0; i < len(args); i += c.Keys.Step {
			out = append(out, i)
		}
		return out
	case "groups":
		return groupKeys(args, 0)
	case "ledger_groups": // the ledger, then RL.ALL's groups
		if len(args) == 0 {
			return nil
		}
		return append([]int{0}, groupKeys(args, c.Keys.GroupsFrom)...)
	case "ledger_pairs": // the ledger, then key units pairs
		if len(args) == 0 {
			return nil
		}
		out := []int{0}
		for i := c.Keys.PairsFrom; i < len(args); i += 2 {
			out = append(out, i)
		}
		return out
	}
	return nil
}

// groupKeys is where the keys of RL.ALL's groups are among args, the first group at at.
func groupKeys(args []string, at int) []int {
	var out []int
	for at+1 < len(args) {
		out = append(out, at)
		n := groupLen(args[at+1], args[at+2:])
		if n < 0 {
			break
		}
		at += 2 + n
	}
	return out
}

// abandonWord is a hold's abandon policy as RL.HOLD takes it: the contract's words in its syntax's
// order (CHARGE|RETURN), its default for AbandonDefault.
func abandonWord(a Abandon) string {
	switch a {
	case Charge:
		return contract.Holds.Abandon[0]
	case Return:
		return contract.Holds.Abandon[1]
	}
	return contract.Holds.AbandonDefault
}

// abandonReturns says whether a hold of abandon policy a gives back the unused part when it is
// left unsettled (RETURN, the contract's second word; AbandonDefault is the contract's default).
func abandonReturns(a Abandon) bool { return abandonWord(a) == contract.Holds.Abandon[1] }

// heldKind says whether the server holds (and settles) a limit of kind: the contract's held kinds.
func heldKind(kind string) bool {
	for _, k := range contract.Holds.HeldKinds {
		if k == kind {
			return true
		}
	}
	return false
}
