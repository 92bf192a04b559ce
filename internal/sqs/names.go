package sqs

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/okiba/okiba/internal/names"
)

// Queue URLs and ARNs.
//
// A queue URL is <base>/<account-id>/<name>, where <base> is Options.BaseURL or, by
// default, the scheme and Host the request came in with (so a client that reaches the
// server as http://localhost:7070 gets URLs it can use as they are). An ARN is
// arn:aws:sqs:<region>:<account-id>:<name>. Both name the queue by name only: requests
// are accepted with any host, account id and region in them, and with a plain queue
// name where a URL is expected.

// queueURL returns the URL of queue name for a client that sent r.
func (f *Front) queueURL(r *http.Request, name string) string {
	return f.baseURL(r) + "/" + f.opts.AccountID + "/" + name
}

// queueURLs returns the URLs of the named queues, never nil: ListDeadLetterSourceQueues
// always carries its list, and ListQueues omits an empty one (omitempty).
func (f *Front) queueURLs(r *http.Request, queues []string) []string {
	urls := make([]string, len(queues))
	for i, n := range queues {
		urls[i] = f.queueURL(r, n)
	}
	return urls
}

func (f *Front) baseURL(r *http.Request) string {
	if f.opts.BaseURL != "" {
		return f.opts.BaseURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
		scheme = p
	}
	host := r.Host
	if host == "" {
		host = "localhost"
	}
	return scheme + "://" + host
}

// queueARN returns the ARN of queue name.
func (f *Front) queueARN(name string) string {
	return "arn:aws:sqs:" + f.opts.Region + ":" + f.opts.AccountID + ":" + name
}

// nameFromURL extracts the queue name from a QueueUrl parameter: a full URL, a path
// /<account>/<name>, or a plain name.
func nameFromURL(s string) (string, *apiError) {
	if s == "" {
		return "", missingParam("QueueUrl")
	}
	p := s
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", newErr(kInvalidAddress, "The address %q is not a valid queue URL.", s)
		}
		p = u.Path
	}
	p = strings.Trim(p, "/")
	parts := strings.Split(p, "/")
	if len(parts) > 2 {
		return "", newErr(kInvalidAddress, "The address %q is not a valid queue URL: expected <endpoint>/<account-id>/<queue-name>.", s)
	}
	name := parts[len(parts)-1]
	if names.Validate(name) != nil {
		return "", newErr(kInvalidAddress, "The address %q does not name a valid queue (%s).", s, nameRule)
	}
	return name, nil
}

// nameFromARN extracts the queue name from an SQS queue ARN.
func nameFromARN(arn string) (string, bool) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" {
		return "", false
	}
	if names.Validate(parts[5]) != nil {
		return "", false
	}
	return parts[5], true
}

// nameRule is the grammar of internal/names in SQS's words.
const nameRule = "a queue name has 1 to 80 characters from A-Z a-z 0-9 _ -, and a FIFO queue's name ends in .fifo"
