package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A usage error in the middleware is the application's bug (a Route's Cost or PolicyFor the
// limiter refuses), not Redis' answer nor the caller's overuse: the request is answered 500, never
// with a decision of the failure policy, and logged at error level once per cause a minute.

// usageLog remembers when each cause was last logged.
type usageLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// maxUsageCauses bounds the causes remembered; past it, they are forgotten (and may be logged once more).
const maxUsageCauses = 1000

func (u *usageLog) first(cause string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if last, seen := u.last[cause]; seen && now.Sub(last) < time.Minute {
		return false
	}
	if u.last == nil || len(u.last) >= maxUsageCauses {
		u.last = map[string]time.Time{}
	}
	u.last[cause] = now
	return true
}

// usageCause is what makes one cause: the route and the error with the caller's tag left out (a
// message may name a key), so every caller meeting the same bug shares one log line.
func usageCause(route, tag string, err error) string {
	quoted := strconv.Quote(tag)
	return route + ": " + strings.NewReplacer(tag, "{caller}", quoted[1:len(quoted)-1], "{caller}").Replace(err.Error())
}

// usageError logs the application's bug (once per cause a minute) and, unless shadow (a shadow
// limit never changes what is served), answers 500.
func (m *middleware) usageError(w http.ResponseWriter, route, tag string, err error, shadow bool) {
	if m.usage.first(usageCause(route, tag, err), time.Now()) {
		m.cfg.Logger.Error("httplimit: a limit could not be checked: the application's configuration is wrong (a Route's Cost or PolicyFor); answered 500, not a rate-limit decision",
			"route", route, "err", err, "shadow", shadow)
	}
	if !shadow {
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
	}
}
