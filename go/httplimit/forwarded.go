package httplimit

import (
	"bytes"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// Reading the forwarding chain from Forwarded (RFC 7239) or X-Forwarded-For, newest hop first. A
// hop that is not an address is invalid. The chain is believed only as far as TrustedProxies say:
// the same rules as the Rust layer (client/src/http/forwarded.rs) and the contract's forwarded
// vectors.

// TrustedProxies are proxies whose forwarding headers are believed (none by default).
type TrustedProxies []netip.Prefix

// ParseTrustedProxies reads networks as written: 10.0.0.0/8, fd00::/8, a single address; host
// bits are allowed (10.1.2.3/8 is 10.0.0.0/8).
func ParseTrustedProxies(nets ...string) (TrustedProxies, error) {
	var out TrustedProxies
	for _, n := range nets {
		n = strings.TrimSpace(n)
		if !strings.Contains(n, "/") {
			a, err := netip.ParseAddr(n)
			if err != nil {
				return nil, err
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (t TrustedProxies) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP is the client's address: the peer's, or, when the peer is a trusted proxy, the nearest
// address in the forwarding chain that is not one (read from the right). An entry that is not an
// address ends the reading. At most the contract's max_hops hops are read.
func (t TrustedProxies) ClientIP(peer netip.Addr, h http.Header) netip.Addr {
	if !peer.IsValid() {
		return peer
	}
	client := peer.Unmap()
	if len(t) == 0 || !t.contains(client) {
		return client
	}
	read := 0
	eachHop(h, func(hop netip.Addr, ok bool) bool {
		if read >= names.Forwarded.MaxHops || !ok {
			return false
		}
		read++
		client = hop.Unmap()
		return t.contains(client)
	})
	return client
}

// eachHop calls f with the chain's hops, newest first, until it returns false: the Forwarded
// header's for= values when there is one (then it alone is read), else X-Forwarded-For's.
func eachHop(h http.Header, f func(netip.Addr, bool) bool) {
	lines, forwarded := h.Values("Forwarded"), true
	if _, has := h["Forwarded"]; !has {
		lines, forwarded = h.Values("X-Forwarded-For"), false
	}
	for i := len(lines) - 1; i >= 0; i-- {
		line := []byte(lines[i])
		end := len(line)
		for {
			start := bytes.LastIndexByte(line[:end], ',')
			entry := line[start+1 : end]
			node, has := entry, true
			if forwarded {
				node, has = forParameter(entry)
			}
			var a netip.Addr
			ok := false
			if has {
				a, ok = parseNode(node)
			}
			if !f(a, ok) {
				return
			}
			if start < 0 {
				break
			}
			end = start
		}
	}
}

const whitespace = " \t\n\f\r"

func forParameter(element []byte) ([]byte, bool) {
	for _, pair := range bytes.Split(element, []byte(";")) {
		pair = bytes.Trim(pair, whitespace)
		if len(pair) >= 4 && strings.EqualFold(string(pair[:4]), "for=") {
			return pair[4:], true
		}
	}
	return nil, false
}

func parseNode(node []byte) (netip.Addr, bool) {
	node = bytes.Trim(node, whitespace)
	if len(node) > names.Forwarded.MaxNodeBytes || !utf8.Valid(node) {
		return netip.Addr{}, false
	}
	text := strings.Trim(string(node), `"`)
	if strings.HasPrefix(text, "[") {
		addr, after, found := strings.Cut(text[1:], "]")
		if !found {
			return netip.Addr{}, false
		}
		if after != "" && !(strings.HasPrefix(after, ":") && isPort(after[1:])) {
			return netip.Addr{}, false
		}
		return parseAddr(addr)
	}
	if a, ok := parseAddr(text); ok {
		return a, true
	}
	i := strings.LastIndexByte(text, ':')
	if i < 0 || !isPort(text[i+1:]) {
		return netip.Addr{}, false
	}
	return ipv4(text[:i])
}

func parseAddr(text string) (netip.Addr, bool) {
	if addr, zone, found := strings.Cut(text, "%"); found {
		if zone == "" {
			return netip.Addr{}, false
		}
		return ipv6(addr)
	}
	if a, ok := ipv4(text); ok {
		return a, true
	}
	return ipv6(text)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func ipv4(text string) (netip.Addr, bool) {
	if !isASCII(text) || text == "" || text[0] < '0' || text[0] > '9' {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(text)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

func ipv6(text string) (netip.Addr, bool) {
	if !isASCII(text) || strings.Contains(text, "%") || !strings.Contains(text, ":") {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(text)
	if err != nil || !a.Is6() {
		return netip.Addr{}, false
	}
	return a, true
}

func isPort(s string) bool {
	if len(s) < 1 || len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}
