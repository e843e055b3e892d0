package redisrate_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis-ratelimit/redis-ratelimit/go/redisrate"
	"github.com/redis/go-redis/v9"
)

// migrate: docs/migrating-redis-rate.md's program, as written there (TestMigrationPage holds the
// page to it).
//
// migrate begin
func migrate(ctx context.Context, rdb *redis.Client, limit redisrate.Limit) error {
	limiter := redisrate.NewLimiter(rdb)
	iter := rdb.Scan(ctx, 0, redisrate.RedisRatePrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		key := strings.TrimPrefix(iter.Val(), redisrate.RedisRatePrefix)
		if _, err := limiter.Migrate(ctx, key, limit); err != nil {
			return err
		}
	}
	return iter.Err()
}

// migrate end

// The page shows migrate as this file has it. Outside the repository (the module as a user gets
// it) there is no page to compare with.
func TestMigrationPage(t *testing.T) {
	page, err := os.ReadFile("../../docs/migrating-redis-rate.md")
	if os.IsNotExist(err) {
		t.Skip("docs/migrating-redis-rate.md: not inside the repository")
	}
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("migrate_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, _ := strings.Cut(string(src), "// migrate begin\n")
	code, _, _ = strings.Cut(code, "\n// migrate end")
	_, block, ok := strings.Cut(string(page), "<!-- migrate: go/redisrate/migrate_test.go runs this function -->\n```go\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || strings.TrimSpace(block) != strings.TrimSpace(code) {
		t.Fatalf("docs/migrating-redis-rate.md's migrate is not go/redisrate/migrate_test.go's:\n%s\n---\n%s", block, code)
	}
}

// What redis_rate v10 counted moves over: after redis_rate allowed 7 of a burst of 10 on a key,
// migrate carries 7 to the key of this package, whose next decisions are redis_rate's own (3
// more, then denied), on the module and on the library; a second migrate carries nothing (the
// key is ours now), nor does a key redis_rate has not counted on or whose TAT is past.
func TestMigrateCarriesRedisRatesStanding(t *testing.T) {
	for _, module := range []bool{true, false} {
		srv := redistest.Start(t, module)
		rdb := srv.Client(t)
		ctx := context.Background()
		theirs := redis_rate.NewLimiter(rdb)
		ours := redisrate.NewLimiter(rdb)
		limit := redisrate.PerMinute(10)
		theirLimit := redis_rate.PerMinute(10)
		for i := 0; i < 7; i++ {
			if res, err := theirs.Allow(ctx, "user:ada", theirLimit); err != nil || res.Allowed != 1 {
				t.Fatalf("redis_rate: %+v %v", res, err)
			}
		}
		if _, err := theirs.Allow(ctx, "user:bob", redis_rate.PerSecond(1000)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // bob's TAT (1 ms ahead) is past
		if err := migrate(ctx, rdb, limit); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			a, err := ours.Allow(ctx, "user:ada", limit)
			if err != nil {
				t.Fatal(err)
			}
			b, err := theirs.Allow(ctx, "user:ada", theirLimit)
			if err != nil {
				t.Fatal(err)
			}
			if a.Allowed != b.Allowed || a.Remaining != b.Remaining {
				t.Fatalf("module=%v, call %d: ours %+v, redis_rate's %+v", module, i, a, b)
			}
			if want := i < 3; (a.Allowed == 1) != want {
				t.Fatalf("module=%v, call %d after the move: %+v", module, i, a)
			}
		}
		if n, err := ours.Migrate(ctx, "user:ada", limit); err != nil || n != 0 {
			t.Fatalf("a second move: %d %v", n, err)
		}
		for _, key := range []string{"user:bob", "user:nobody"} {
			if n, err := ours.Migrate(ctx, key, limit); err != nil || n != 0 {
				t.Fatalf("%s: %d %v", key, n, err)
			}
		}
		if err := rdb.Set(ctx, redisrate.RedisRatePrefix+"user:odd", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := ours.Migrate(ctx, "user:odd", limit); err == nil || !strings.Contains(err.Error(), "does not hold redis_rate's TAT") {
			t.Fatalf("a foreign value: %v", err)
		}
	}
}
