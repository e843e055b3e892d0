package ratelimit

// The contract, the Lua library and its EVALSHA scripts are the repository's (contract/contract.json,
// lua/ratelimit.lua, lua/scripts/);
// the go:embed directive cannot reach outside the module, so the module holds copies, and
// copies_test.go fails when they differ. After the contract or the library changes: go generate ./...
//go:generate cp ../contract/contract.json contract.json
//go:generate cp ../lua/ratelimit.lua ratelimit.lua
//go:generate sh -c "rm -rf scripts && cp -r ../lua/scripts scripts"
