package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/okiba/okiba/api"
)

// groupCalls makes the consumer-group requests of the native API that the Go client does
// not have yet (create, pull, commit, seek), for lesson 5. They go where the client goes —
// its Server address, with the node's token — as plain HTTP with the API's JSON, so they
// are requests of the native API like the client's own, authenticated, counted and
// logged by the node; errors come back as *api.Error, which client.IsCode reads. When the
// client gains these calls, the lesson should use them and this file go.
type groupCalls struct {
	base  string
	token string
	hc    *http.Client
}

func newGroupCalls(base, token string) *groupCalls {
	return &groupCalls{base: strings.TrimSuffix(base, "/"), token: token, hc: &http.Client{Timeout: 30 * time.Second}}
}

func gpath(topic, group string, rest ...string) string {
	p := "/v1/topics/" + url.PathEscape(topic) + "/groups/" + url.PathEscape(group)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// do sends in as JSON and decodes a success into out; an answer of 300 or more is the
// API's error.
func (g *groupCalls) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if g.token != "" {
		req.Header.Set("Authorization", "Bearer "+g.token)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error == nil {
			return &api.Error{Code: api.CodeInternal, Status: resp.StatusCode, Message: fmt.Sprintf("%s %s: HTTP %d", method, path, resp.StatusCode)}
		}
		eb.Error.Status = resp.StatusCode
		return eb.Error
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, out)
}

func (g *groupCalls) put(ctx context.Context, topic, group string, cfg api.GroupConfig) (*api.Group, error) {
	var out api.Group
	if err := g.do(ctx, "PUT", gpath(topic, group), cfg, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (g *groupCalls) get(ctx context.Context, topic, group string) (*api.Group, error) {
	var out api.Group
	if err := g.do(ctx, "GET", gpath(topic, group), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (g *groupCalls) pull(ctx context.Context, topic, group string, req api.PullRequest) (*api.PullResponse, error) {
	var out api.PullResponse
	if err := g.do(ctx, "POST", gpath(topic, group, "pull"), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// commit commits offsets; the error is the whole request's, or the first offset's own.
func (g *groupCalls) commit(ctx context.Context, topic, group string, req api.CommitRequest) error {
	var out api.ReceiptsResponse
	if err := g.do(ctx, "POST", gpath(topic, group, "commit"), req, &out); err != nil {
		return err
	}
	for _, r := range out.Results {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}

func (g *groupCalls) seek(ctx context.Context, topic, group string, req api.SeekRequest) (*api.Group, error) {
	var out api.Group
	if err := g.do(ctx, "POST", gpath(topic, group, "seek"), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
