package ratelimit

// The contract and the Lua library are the repository's (contract/contract.json, lua/ratelimit.lua);
// the go:embed directive cannot reach outside the module, so the module holds copies, and
// copies_test.go fails when they differ. After the contract or the library changes: go generate ./...
//go:generate cp ../contract/contract.json contract.json
//go:generate cp ../lua/ratelimit.lua ratelimit.lua
