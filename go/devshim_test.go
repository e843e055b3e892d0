package ratelimit

// TEMPORARY (until the lead's contract with "batching" lands): remove.
func init() {
	if contract.Batching.Grow != 0 {
		return
	}
	b := &contract.Batching
	b.Start, b.Grow, b.Share, b.RefundMarginMs, b.SweepMs, b.MaxKeys, b.LeaseMs = 1, 2, 2, 100, 1000, 65536, 1000
	b.Kinds = map[string]string{"token_bucket": "none", "fixed_window": "reset", "sliding_counter": "reset_minus_window"}
	b.Errors.Batch = "must be a whole number from 1 to the policy's limit"
	b.Errors.Lease = "must be at least 1 ms, in whole milliseconds"
	b.Errors.Kind = "a {kind} cannot batch: it takes no refunds"
}
