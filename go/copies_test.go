package ratelimit

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// The module's copies of the contract and the library are the repository's (go generate ./...
// writes them again). Outside the repository (the module as a user gets it) there is nothing to
// compare with.
func TestCopiesAreTheRepositorys(t *testing.T) {
	for copyName, source := range map[string]string{
		"contract.json": filepath.Join("..", "contract", "contract.json"),
		"ratelimit.lua": filepath.Join("..", "lua", "ratelimit.lua"),
	} {
		want, err := os.ReadFile(source)
		if os.IsNotExist(err) {
			t.Skipf("%s: not inside the repository", source)
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(copyName)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("go/%s differs from %s: run go generate ./... in go/ (or cargo run -p contract-gen)", copyName, source)
		}
	}
}

func TestTheLibraryIsTheContractsAndItsScriptsHaveTheirSHA1s(t *testing.T) {
	sum := sha1.Sum([]byte(librarySource))
	if got := hex.EncodeToString(sum[:]); got != contract.Library.SourceSHA1 {
		t.Errorf("the embedded library's SHA-1 is %s, the contract says %s", got, contract.Library.SourceSHA1)
	}
	for _, f := range contract.Library.Functions {
		if got := ScriptSHA1(f.Name); got != f.SHA1 {
			t.Errorf("%s: the embedded EVALSHA script's SHA-1 is %s, the contract says %s (go generate ./...)", f.Name, got, f.SHA1)
		}
	}
	// Every command with a library function is one the package sends through the library.
	for _, c := range contract.Commands {
		if c.Function != nil && functionOf[c.Name] != *c.Function {
			t.Errorf("%s: function %q not known", c.Name, *c.Function)
		}
	}
	for _, k := range contract.Kinds {
		if _, ok := commands[k.Command]; !ok {
			t.Errorf("kind %s: command %s is not in the contract's commands", k.Name, k.Command)
		}
	}
}
