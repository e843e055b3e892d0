package ratelimit

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// No contract literal is re-typed in the module: the header names (the LLM headers' too), the problem types, the problem
// bodies' titles and details, the error texts the contract holds, the caller key's markers, every
// command's name (the kinds' commands and the commands table's, RL.ALL too), the calls' and request
// forms' words and the bounds' digits are read from the contract (contract.go), never written out in
// another file. A string literal (not a comment) anywhere else in the module's library source that
// holds one (or is one, for a short word such as UPTO or WEIGHT), or an integer literal that is one of
// the bounds, fails this test, naming the file and line.

// literalReaders are the files that read the contract (and so may name its members).
var literalReaders = map[string]bool{"contract.go": true}

// literalSkipped are the directories that are no library: the benchmark and the examples.
var literalSkipped = map[string]bool{"internal/bench": true, "examples": true, "testdata": true}

// contractLiterals is every contract value a file could re-type: long enough to mean something on
// its own. The contract is the module's copy (contract.json), read as plain JSON so that this test
// does not lean on contract.go's structs.
func contractLiterals(t testing.TB) (words, whole []string, bounds []uint64) {
	t.Helper()
	var doc struct {
		HTTP struct {
			Headers      map[string]string `json:"headers"`
			ProblemTypes map[string]string `json:"problem_types"`
			Caller       struct {
				Markers map[string]string `json:"markers"`
				Forms   []string          `json:"forms"`
			} `json:"caller"`
			Problems map[string]struct {
				Title  string `json:"title"`
				Detail string `json:"detail"`
			} `json:"problems"`
			ProblemWhat map[string]string `json:"problem_what"`
			LLM         struct {
				Name   string   `json:"name"`
				Fields []string `json:"fields"`
				Units  []string `json:"units"`
			} `json:"llm"`
		} `json:"http"`
		Calls  map[string][]string `json:"calls"`
		Errors struct {
			Render       map[string]string `json:"render"`
			DuplicateKey string            `json:"duplicate_key"`
			Syntax       string            `json:"syntax"`
			State        string            `json:"state"`
			WrongType    string            `json:"wrong_type"`
		} `json:"errors"`
		Commands []struct {
			Name string `json:"name"`
		} `json:"commands"`
		RequestForms map[string]struct {
			Option *struct {
				Word string `json:"word"`
			} `json:"option"`
		} `json:"request_forms"`
		Kinds []struct {
			Command string `json:"command"`
			Params  []struct {
				Errors []struct {
					Reply string `json:"reply"`
				} `json:"errors"`
			} `json:"params"`
		} `json:"kinds"`
		Batching struct {
			Errors map[string]string `json:"errors"`
		} `json:"batching"`
		Bounds struct {
			MaxHorizonSecs *uint64 `json:"max_horizon_secs"`
			MaxLeaseLimit  *uint64 `json:"max_lease_limit"`
		} `json:"bounds"`
		Fallback struct {
			MaxKeys *uint64 `json:"max_keys"`
		} `json:"fallback"`
		Holds struct {
			Abandon []string `json:"abandon"`
			Modes   []string `json:"modes"`
			Ledger  string   `json:"ledger"`
			Calls   struct {
				Hold   []string `json:"hold"`
				Settle []string `json:"settle"`
			} `json:"calls"`
			Errors []struct {
				Reply string `json:"reply"`
			} `json:"errors"`
			MaxTTLSecs     *uint64 `json:"max_ttl_secs"`
			TTLDefaultSecs *uint64 `json:"ttl_default_secs"`
		} `json:"holds"`
	}
	if err := json.Unmarshal(contractJSON, &doc); err != nil {
		t.Fatal(err)
	}
	var found []string
	for name, header := range doc.HTTP.Headers {
		if name != "state" {
			found = append(found, header)
		}
	}
	for _, problem := range doc.HTTP.ProblemTypes {
		found = append(found, problem)
	}
	markers := doc.HTTP.Caller.Markers
	if len(markers) == 0 {
		// A contract from before http.caller.markers: the markers are what its forms write
		// between "{kind}" and the id ("{kind}.esc:{escaped id}").
		markers = map[string]string{}
		for i, form := range doc.HTTP.Caller.Forms {
			if rest, ok := strings.CutPrefix(form, "{kind}"); ok {
				marker, _, _ := strings.Cut(rest, "{")
				markers[strconv.Itoa(i)] = marker
			}
		}
	}
	for _, marker := range markers {
		if len(marker) > 1 {
			found = append(found, marker)
		}
	}
	for _, text := range doc.Errors.Render {
		found = append(found, text)
	}
	found = append(found, doc.Errors.DuplicateKey, doc.Errors.Syntax, doc.Errors.State, doc.Errors.WrongType)
	for _, kind := range doc.Kinds {
		for _, param := range kind.Params {
			for _, e := range param.Errors {
				found = append(found, e.Reply)
			}
		}
	}
	for _, text := range doc.Batching.Errors {
		found = append(found, text)
	}
	// A problem's title is a whole literal; its detail's fixed parts, between its placeholders and
	// clauses ("' could not be checked"), are looked for inside any; so are the calls' command names,
	// and their shorter words (UPTO) are whole literals, as what a detail calls a limit is.
	for _, problem := range doc.HTTP.Problems {
		whole = append(whole, problem.Title)
		for _, part := range detailParts.Split(problem.Detail, -1) {
			if part = strings.TrimSpace(part); len(part) >= 10 {
				found = append(found, part)
			}
		}
	}
	// A hold's words (CHARGE, RETURN, FINAL, PARTIAL) are whole literals; its ledger's template and
	// error texts (the template up to its tag) are looked for inside any, its calls' words as the calls' are.
	whole = append(whole, doc.Holds.Abandon...)
	whole = append(whole, doc.Holds.Modes...)
	ledgerHead, _, _ := strings.Cut(doc.Holds.Ledger, "{")
	found = append(found, ledgerHead)
	for _, e := range doc.Holds.Errors {
		found = append(found, e.Reply)
	}
	calls := [][]string{}
	for _, call := range doc.Calls {
		calls = append(calls, call)
	}
	calls = append(calls, doc.Holds.Calls.Hold, doc.Holds.Calls.Settle)
	for _, call := range calls {
		for _, word := range call {
			switch {
			case strings.HasPrefix(word, "{"):
			case len(word) < 5:
				whole = append(whole, word)
			default:
				found = append(found, word)
			}
		}
	}
	for _, what := range doc.HTTP.ProblemWhat {
		whole = append(whole, what)
	}
	// The LLM headers (http.llm): every name its template makes and the template's fixed parts
	// (x-ratelimit-) are looked for inside any literal; its units (requests, tokens) are whole
	// literals. Its fields (limit, remaining, reset) are not: they are the structured fields'
	// placeholders too.
	found = append(found, detailParts.Split(doc.HTTP.LLM.Name, -1)...)
	for _, unit := range doc.HTTP.LLM.Units {
		whole = append(whole, unit)
		for _, field := range doc.HTTP.LLM.Fields {
			found = append(found, strings.NewReplacer("{field}", field, "{unit}", unit).Replace(doc.HTTP.LLM.Name))
		}
	}
	// Every command the contract names: each kind's (RL.TOKEN) and the commands table's (RL.ALL, RL.TOP,
	// the dialects); a short one (GCRA) is a whole literal.
	var names []string
	for _, kind := range doc.Kinds {
		names = append(names, kind.Command)
	}
	for _, c := range doc.Commands {
		names = append(names, c.Name)
	}
	for _, name := range names {
		if len(name) < 5 {
			whole = append(whole, name)
		} else {
			found = append(found, name)
		}
	}
	// A request form's option word (WEIGHT, DEDUP) is a whole literal.
	for _, form := range doc.RequestForms {
		if form.Option != nil {
			whole = append(whole, form.Option.Word)
		}
	}
	seen := map[string]bool{}
	for _, f := range found {
		if len(f) >= 5 && !seen[f] {
			seen[f] = true
			words = append(words, f)
		}
	}
	sort.Strings(words)
	// The bounds a file could re-type as a number (those no unit conversion shares), a hold's
	// default ttl in seconds among them (300: `300 * time.Second`). A contract from before
	// fallback.max_keys lacks that one.
	for _, bound := range []*uint64{doc.Bounds.MaxHorizonSecs, doc.Fallback.MaxKeys, doc.Bounds.MaxLeaseLimit, doc.Holds.MaxTTLSecs, doc.Holds.TTLDefaultSecs} {
		if bound != nil && !slices.Contains(bounds, *bound) {
			bounds = append(bounds, *bound)
		}
	}
	if len(words) < 20 || len(bounds) < 2 {
		t.Fatalf("the contract gave %d literals and %d bounds: its shape changed under this test", len(words), len(bounds))
	}
	return words, whole, bounds
}

// detailParts splits a problem's detail at its placeholders and clauses.
var detailParts = regexp.MustCompile(`\{\w+\}|[:;]`)

// retypedLiterals lists a parsed file's string literals that hold one of words or are one of whole
// (case-insensitively) and its integer literals (underscores allowed) that are one of bounds, as
// "file:line: ...". Comments are no literals: prose may name the contract's values.
func retypedLiterals(fset *token.FileSet, file *ast.File, words, whole []string, bounds []uint64) []string {
	var found []string
	ast.Inspect(file, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok {
			return true
		}
		at := fset.Position(lit.Pos())
		where := fmt.Sprintf("%s:%d", filepath.ToSlash(at.Filename), at.Line)
		switch lit.Kind {
		case token.STRING:
			text, err := strconv.Unquote(lit.Value)
			if err != nil {
				text = lit.Value
			}
			lower := strings.ToLower(text)
			for _, w := range words {
				if strings.Contains(lower, strings.ToLower(w)) {
					found = append(found, fmt.Sprintf("%s: %.80s holds %q", where, lit.Value, w))
				}
			}
			for _, w := range whole {
				if lower == strings.ToLower(w) {
					found = append(found, fmt.Sprintf("%s: %.80s is a contract word", where, lit.Value))
				}
			}
		case token.INT:
			value, err := strconv.ParseUint(lit.Value, 0, 64)
			if err != nil {
				return true
			}
			for _, b := range bounds {
				if value == b {
					found = append(found, fmt.Sprintf("%s: the bound %s", where, lit.Value))
				}
			}
		}
		return true
	})
	return found
}

// literalSources is the module's library source: every non-test .go file but the readers',
// the skipped directories' and generated ones (GENERATED in the first line).
func literalSources(t testing.TB) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		slashed := filepath.ToSlash(path)
		if d.IsDir() {
			if literalSkipped[slashed] || (path != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || literalReaders[slashed] {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		first, _, _ := strings.Cut(string(text), "\n")
		if strings.Contains(first, "GENERATED") {
			return nil
		}
		paths = append(paths, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

func TestNoContractLiteralIsRetyped(t *testing.T) {
	words, whole, bounds := contractLiterals(t)
	paths := literalSources(t)
	if len(paths) < 10 {
		t.Fatalf("only %d source files found: %v", len(paths), paths)
	}
	var found []string
	fset := token.NewFileSet()
	for _, path := range paths {
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, retypedLiterals(fset, file, words, whole, bounds)...)
	}
	if len(found) > 0 {
		t.Fatalf("read these from the contract (contract.go):\n%s", strings.Join(found, "\n"))
	}
}

// The guard itself: a file that writes a header name and a bound is caught; a comment is not.
func TestTheGuardSeesARetypedLiteral(t *testing.T) {
	words, whole, bounds := contractLiterals(t)
	const bad = "package bad\n\n// Writes ratelimit-remaining in prose, and 100_000.\nconst name = \"RateLimit-Remaining\"\n\nconst max = 100_000\n\nvar raw = `x-ratelimit-degraded`\n" +
		"var cmd = []string{\"RL.TAKE\", \"k\"}\nvar upto = \"UPTO\"\nvar title = \"Too Many Requests\"\nvar detail = \"rate limit '%s' exceeded: retry in %d s\"\n" +
		"var all = []string{\"RL.ALL\", \"k\"}\nvar peek = []string{\"rl.token\", \"k\", \"1\", \"1\", \"0\"}\nvar dialect = \"GCRA\"\n" +
		"var lease = []string{\"h\", \"WEIGHT\", \"2\"}\n" +
		"var settle = []string{\"rl.settle\", \"rl:holds:{t}\", \"id\", \"FINAL\"}\nvar abandon = \"charge\"\nconst ttl = 86400\n" +
		"var llm = \"X-RateLimit-Remaining-Tokens\"\nvar unit = \"tokens\"\nvar llmName = fmt.Sprintf(\"x-ratelimit-%s-%s\", f, u)\n" +
		"const holdTTL = 300 * time.Second\n"
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "bad.go", bad, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	found := retypedLiterals(fset, file, words, whole, bounds)
	want := []string{"bad.go:4:", "bad.go:6:", "bad.go:8:", "bad.go:8:", "bad.go:9:", "bad.go:10:", "bad.go:11:", "bad.go:12:", "bad.go:12:", "bad.go:13:", "bad.go:14:", "bad.go:15:", "bad.go:16:", "bad.go:17:", "bad.go:17:", "bad.go:17:", "bad.go:18:", "bad.go:19:", "bad.go:20:", "bad.go:20:", "bad.go:20:", "bad.go:21:", "bad.go:22:", "bad.go:23:"}
	if len(found) != len(want) {
		t.Fatalf("found %q, want one hit at each of %q", found, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(found[i], w) {
			t.Fatalf("found %q, want one hit at each of %q", found, want)
		}
	}
}

// A hold's default ttl is the contract's (holds.ttl_default_secs), not a duration typed in hold.go
// (a retyped `5 * time.Minute` has no literal the guard above could see): DefaultHoldTTL says the
// contract's seconds, and no library file but the contract's reader gives it a value.
func TestDefaultHoldTTLIsTheContracts(t *testing.T) {
	var doc struct {
		Holds struct {
			TTLDefaultSecs int64 `json:"ttl_default_secs"`
		} `json:"holds"`
	}
	if err := json.Unmarshal(contractJSON, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Holds.TTLDefaultSecs <= 0 || DefaultHoldTTL != time.Duration(doc.Holds.TTLDefaultSecs)*time.Second {
		t.Fatalf("DefaultHoldTTL is %v, the contract's holds.ttl_default_secs %d", DefaultHoldTTL, doc.Holds.TTLDefaultSecs)
	}
	fset := token.NewFileSet()
	for _, path := range literalSources(t) {
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if name.Name == "DefaultHoldTTL" && i < len(n.Values) {
						t.Errorf("%s: DefaultHoldTTL is given a value outside contract.go", fset.Position(n.Pos()))
					}
				}
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if id, ok := lhs.(*ast.Ident); ok && id.Name == "DefaultHoldTTL" {
						t.Errorf("%s: DefaultHoldTTL is assigned outside contract.go", fset.Position(n.Pos()))
					}
				}
			}
			return true
		})
	}
}
