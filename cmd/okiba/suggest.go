package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// didYouMean returns ` (did you mean "x"?)` for the candidate closest to name, or ""
// when none is close: within a third of the name's length in edits (at least one), or
// the only one that starts with it.
func didYouMean(name string, candidates []string) string {
	best, bestDist := "", -1
	var prefixed []string
	for _, c := range candidates {
		if strings.HasPrefix(c, name) {
			prefixed = append(prefixed, c)
		}
		d := editDistance(strings.ToLower(name), strings.ToLower(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	switch {
	case bestDist >= 0 && bestDist <= max(1, len(name)/3):
		return best
	case len(prefixed) == 1 && name != "":
		return prefixed[0]
	}
	return ""
}

// editDistance counts the insertions, deletions, substitutions and swaps of adjacent
// bytes that turn a into b (optimal string alignment): "dealy" is one from "delay".
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// quotedName finds the first quoted name in an error's message: queue_not_found's names
// the queue (`queue "ordres" not found`).
var quotedName = regexp.MustCompile(`"([^"]+)"`)

// queueMeant suggests the queue closest to the one an error says is not found, from the
// server's list, or says nothing when none is close (or the list cannot be had: the
// caller may not browse, the server is gone).
func (a *app) queueMeant(ctx context.Context, msg string) string {
	m := quotedName.FindStringSubmatch(msg)
	if m == nil || a.client == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	qs, err := a.client.Queues(ctx, "")
	if err != nil {
		return ""
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	if s := didYouMean(m[1], names); s != "" && s != m[1] {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}
