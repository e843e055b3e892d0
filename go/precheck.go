package ratelimit

import (
	"strconv"
	"strings"
)

// What a client can know is wrong before sending (docs/errors.md, "Refused before sending"):
// refused as usage errors with the code and text Redis would give.

// keysOf is a module command's keys.
func keysOf(cmd []string) []string {
	if len(cmd) < 2 {
		return nil
	}
	pos := keyPositions(cmd[0], cmd[1:])
	keys := make([]string, len(pos))
	for i, p := range pos {
		keys[i] = cmd[1+p]
	}
	return keys
}

// precheck refuses an empty key, the same key twice, and on a cluster client keys in different
// hash slots.
func (l *Limiter) precheck(keys []string) error {
	return precheckKeys(keys, l.cluster)
}

func precheckKeys(keys []string, cluster bool) error {
	for i, k := range keys {
		if k == "" {
			return usageReply(contract.Errors.Render["empty_key"])
		}
		for _, earlier := range keys[:i] {
			if earlier == k {
				return usageReply(contract.Errors.DuplicateKey)
			}
		}
	}
	if cluster && len(keys) > 1 {
		slot := hashSlot(keys[0])
		for _, k := range keys[1:] {
			if hashSlot(k) != slot {
				return usageReply(contract.Errors.Render["cross_slot"])
			}
		}
	}
	return nil
}

// hashSlot is a key's Redis Cluster slot: CRC16 of its hash tag (the first {...} with something
// inside) or of the whole key, modulo 16384.
func hashSlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// ParseCost reads a cost written by a caller (a query parameter, a header): a whole number from
// 0 to the contract's largest, else a *UsageError with the module's own text ("ERR invalid cost:
// must be a whole number >= 0", "... too large").
func ParseCost(text string) (uint64, error) {
	invalid := requestReply("cost")
	digits := text != ""
	for i := 0; i < len(text); i++ {
		digits = digits && text[i] >= '0' && text[i] <= '9'
	}
	if !digits {
		return 0, usageReply(invalid)
	}
	n, err := strconv.ParseUint(text, 10, 64)
	if err != nil || n > contract.Bounds.MaxWhole {
		return 0, usageReply(strings.NewReplacer("{field}", "cost", "{expected}", contract.Errors.TooLarge).Replace(contract.Errors.Format))
	}
	return n, nil
}

// requestReply is the module's reply to an invalid request field (the contract's errors.requests).
func requestReply(field string) string {
	for _, r := range contract.Errors.Requests {
		if r.Field == field {
			return r.Reply
		}
	}
	panic("redis-ratelimit: the contract has no request error for " + field)
}

// LimitKey is the key an HTTP layer or adapter gives the limit named name of a caller whose tag
// is tag ("rl:{user:42}"), for a policy: the contract's http.limit_key, "{tag}:{name}:{owner}",
// where owner is the kind whose state the key holds (a token bucket's for a reservation). A limit
// whose kind changes starts afresh on its new key; one whose numbers change carries on.
func LimitKey(tag, name string, p Policy) string {
	owner := ""
	if p.kind != nil {
		owner = p.kind.Owner
	}
	return strings.NewReplacer("{tag}", tag, "{name}", name, "{owner}", owner).Replace(contract.HTTP.LimitKey)
}
