package sqs

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/okiba/okiba/internal/auth"
)

// AWS Signature Version 4, verified on the server side.
//
// Without Options.Keys the front accepts every request, signed or not, with any access
// key and any credential scope: the SDKs need some credentials to sign with and any
// will do. With keys, every request must carry an Authorization header
// "AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/sqs/aws4_request,
// SignedHeaders=…, Signature=…" whose signature matches the one computed with one of
// that key's secrets (a principal's, two during a rotation) over the canonical request
// (method, path, query, the signed headers, and the SHA-256 of the body), and whose
// X-Amz-Date is within maxSkew of the server's clock.
//
// A query-protocol request may instead be presigned (kombu signs its GETs so), with an
// empty body: the
// signature's parts are query parameters (X-Amz-Algorithm, X-Amz-Credential,
// X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature), the canonical query
// is every parameter but X-Amz-Signature, the payload hash is UNSIGNED-PAYLOAD (botocore)
// or that of the empty body (other signers), and the request is good from X-Amz-Date
// (less maxSkew) until X-Amz-Expires seconds after it, at most seven days. Since the
// query carries everything the request does, the signed headers need only include host.
//
// What the signature covers is what the front trusts, so it must cover everything the
// front reads to decide what a request does (signedRequired): the body (always: its
// hash is part of the canonical request), host, x-amz-date, and x-amz-target and
// content-type when the request has them — x-amz-target names the action, so a
// signature that left it out would let anyone who saw one request replay its body as
// another action. The AWS SDKs and CLI sign every header they send.
//
// A query-protocol request (one without x-amz-target) need not sign its content-type:
// it names its action in the body, which the hash covers, or in the query string, which
// the canonical request covers, and its body is read as a form whatever its
// content-type says (queryParams), so an unsigned one changes nothing the front does.
// kombu 5.2 relies on this: it signs its receives over host and x-amz-date only, and
// libcurl then adds the form's content-type.
//
// The credential scope must be this front's: service "sqs" and Options.Region. AWS
// refuses a scope whose region is not the endpoint's, and the SDKs sign with the region
// they are configured with, so a client configured for another region is told which
// one to use rather than served under a scope that names somewhere else.
const (
	sigAlgorithm = "AWS4-HMAC-SHA256"
	maxSkew      = 15 * time.Minute
	amzDate      = "20060102T150405Z"
)

// sigV4 holds the parts of a parsed Authorization header.
type sigV4 struct {
	keyID, date, region, service string
	signedHeaders                []string
	signature                    string
}

func parseAuthorization(h string) (sigV4, *apiError) {
	var s sigV4
	alg, rest, ok := strings.Cut(h, " ")
	if !ok || alg != sigAlgorithm {
		return s, newErr(kIncompleteSignature, "Authorization header must use %s (Signature Version 4)", sigAlgorithm)
	}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return s, newErr(kIncompleteSignature, "Authorization header has a malformed part %q", part)
		}
		switch k {
		case "Credential":
			f := strings.Split(v, "/")
			if len(f) != 5 || f[4] != "aws4_request" || f[0] == "" {
				return s, newErr(kIncompleteSignature, "Credential must be <access key id>/<yyyymmdd>/<region>/sqs/aws4_request, got %q", v)
			}
			s.keyID, s.date, s.region, s.service = f[0], f[1], f[2], f[3]
		case "SignedHeaders":
			s.signedHeaders = strings.Split(v, ";")
		case "Signature":
			s.signature = v
		}
	}
	if s.keyID == "" || len(s.signedHeaders) == 0 || s.signature == "" {
		return s, newErr(kIncompleteSignature, "Authorization header must include Credential, SignedHeaders and Signature")
	}
	return s, nil
}

// signedRequired returns the first header r has (host and x-amz-date it must have) that
// the signature must cover and does not: content-type only with x-amz-target (the JSON
// protocol), since a query request's content-type decides nothing.
func signedRequired(r *http.Request, signed []string) (string, bool) {
	json := len(r.Header.Values("X-Amz-Target")) > 0
	for _, h := range []string{"host", "x-amz-date", "x-amz-target", "content-type"} {
		present := h == "host" || h == "x-amz-date" || len(r.Header.Values(h)) > 0
		if h == "content-type" && !json {
			present = false
		}
		if present && !slices.Contains(signed, h) {
			return h, true
		}
	}
	return "", false
}

// checkScope refuses a credential scope that is not this front's for service ("sqs",
// or "sns" for the SNS requests the query dispatch hands on).
func (f *Front) checkScope(s sigV4, service string) *apiError {
	if s.service != service {
		return newErr(kSignatureDoesNotMatch, "Credential should be scoped to correct service: '%s', not %q: sign the request for the %s service", service, s.service, strings.ToUpper(service))
	}
	if s.region != f.opts.Region {
		return newErr(kSignatureDoesNotMatch, "Credential should be scoped to a valid region: this server serves region %q, not %q: configure the client with region %q (or the server with sqs.region / --sqs-region)", f.opts.Region, s.region, f.opts.Region)
	}
	return nil
}

// authenticate verifies r (whose body has been read into body) and returns the
// principal it was signed by (anonymous, allowed everything, when the front has no
// keys). service is the service the request must be signed for.
func (f *Front) authenticate(r *http.Request, body []byte, now time.Time, service string) (auth.Principal, *apiError) {
	h := r.Header.Get("Authorization")
	presigned := h == "" && r.URL.Query().Has("X-Amz-Signature")
	if f.opts.Keys == nil {
		p := auth.Principal{Method: auth.Anonymous, Grants: auth.AdminGrants}
		if s, err := parseAuthorization(h); err == nil {
			p.Name = s.keyID
		} else if s, err := parsePresigned(r.URL.Query()); presigned && err == nil {
			p.Name = s.keyID
		}
		return p, nil
	}
	var none auth.Principal
	if presigned {
		if len(body) > 0 {
			// The signature does not cover a body: what it holds could be anyone's.
			return none, newErr(kIncompleteSignature, "a presigned request carries its parameters in its query string: its body is not signed and must be empty")
		}
		return f.authenticatePresigned(r, now, service)
	}
	if h == "" {
		return none, newErr(kMissingAuth, "Request is missing Authentication Token: sign it with AWS Signature Version 4 using a principal's name as the access key id and its secret")
	}
	s, e := parseAuthorization(h)
	if e != nil {
		return none, e
	}
	if missing, ok := signedRequired(r, s.signedHeaders); ok {
		return none, newErr(kIncompleteSignature, "SignedHeaders must include %s: a signature must cover the headers that say what the request does (host, x-amz-date, and x-amz-target and content-type when given)", missing)
	}
	if e := f.checkScope(s, service); e != nil {
		return none, e
	}
	p, secrets, ok := f.opts.Keys.SigningSecrets(s.keyID)
	if !ok {
		return none, newErr(kInvalidClientTokenID, "The security token included in the request is invalid: unknown access key id %q", s.keyID)
	}
	date := r.Header.Get("X-Amz-Date")
	t, err := time.Parse(amzDate, date)
	if err != nil {
		return none, newErr(kIncompleteSignature, "X-Amz-Date must be given as yyyymmddThhmmssZ, got %q", date)
	}
	if d := now.Sub(t); d > maxSkew || d < -maxSkew {
		return none, newErr(kRequestExpired, "Signature expired: %s is more than %v away from the server's time %s", date, maxSkew, now.UTC().Format(amzDate))
	}
	if s.date != date[:8] {
		return none, newErr(kSignatureDoesNotMatch, "Credential date %s does not match X-Amz-Date %s", s.date, date)
	}
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	if given := r.Header.Get("X-Amz-Content-Sha256"); given != "" && given != payloadHash {
		return none, newErr(kSignatureDoesNotMatch, "X-Amz-Content-Sha256 does not match the request body")
	}
	canonical := canonicalRequest(r, s.signedHeaders, payloadHash)
	for _, secret := range secrets {
		want := signature(secret, s, date, canonical)
		if subtle.ConstantTimeCompare([]byte(want), []byte(s.signature)) == 1 {
			return p, nil
		}
	}
	return none, newErr(kSignatureDoesNotMatch, "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
}

// unsignedPayload is the payload hash of a presigned request in botocore's signer.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// maxPresignedExpiry is the longest X-Amz-Expires SigV4 allows: seven days.
const maxPresignedExpiry = 7 * 24 * time.Hour

// parsePresigned reads the signature of a presigned request from its query.
func parsePresigned(qv url.Values) (sigV4, *apiError) {
	var s sigV4
	if alg := qv.Get("X-Amz-Algorithm"); alg != sigAlgorithm {
		return s, newErr(kIncompleteSignature, "X-Amz-Algorithm must be %s (Signature Version 4), got %q", sigAlgorithm, alg)
	}
	f := strings.Split(qv.Get("X-Amz-Credential"), "/")
	if len(f) != 5 || f[4] != "aws4_request" || f[0] == "" {
		return s, newErr(kIncompleteSignature, "X-Amz-Credential must be <access key id>/<yyyymmdd>/<region>/sqs/aws4_request, got %q", qv.Get("X-Amz-Credential"))
	}
	s.keyID, s.date, s.region, s.service = f[0], f[1], f[2], f[3]
	if v := qv.Get("X-Amz-SignedHeaders"); v != "" {
		s.signedHeaders = strings.Split(v, ";")
	}
	s.signature = qv.Get("X-Amz-Signature")
	if len(s.signedHeaders) == 0 || s.signature == "" || qv.Get("X-Amz-Date") == "" || qv.Get("X-Amz-Expires") == "" {
		return s, newErr(kIncompleteSignature, "a presigned request must include X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders and X-Amz-Signature")
	}
	return s, nil
}

// authenticatePresigned verifies a GET whose signature is in its query string.
func (f *Front) authenticatePresigned(r *http.Request, now time.Time, service string) (auth.Principal, *apiError) {
	var none auth.Principal
	qv := r.URL.Query()
	s, e := parsePresigned(qv)
	if e != nil {
		return none, e
	}
	if !slices.Contains(s.signedHeaders, "host") {
		return none, newErr(kIncompleteSignature, "X-Amz-SignedHeaders must include host")
	}
	if e := f.checkScope(s, service); e != nil {
		return none, e
	}
	p, secrets, ok := f.opts.Keys.SigningSecrets(s.keyID)
	if !ok {
		return none, newErr(kInvalidClientTokenID, "The security token included in the request is invalid: unknown access key id %q", s.keyID)
	}
	date := qv.Get("X-Amz-Date")
	t, err := time.Parse(amzDate, date)
	if err != nil {
		return none, newErr(kIncompleteSignature, "X-Amz-Date must be given as yyyymmddThhmmssZ, got %q", date)
	}
	secs, err := strconv.ParseInt(qv.Get("X-Amz-Expires"), 10, 64)
	if err != nil || secs < 1 || time.Duration(secs)*time.Second > maxPresignedExpiry {
		return none, newErr(kIncompleteSignature, "X-Amz-Expires must be a number of seconds from 1 to %d, got %q", int64(maxPresignedExpiry/time.Second), qv.Get("X-Amz-Expires"))
	}
	if now.Before(t.Add(-maxSkew)) || now.After(t.Add(time.Duration(secs)*time.Second)) {
		return none, newErr(kRequestExpired, "Request has expired: signed at %s for %d seconds; the server's time is %s", date, secs, now.UTC().Format(amzDate))
	}
	if s.date != date[:8] {
		return none, newErr(kSignatureDoesNotMatch, "Credential date %s does not match X-Amz-Date %s", s.date, date)
	}
	unsigned := *r
	u := *r.URL
	rest := url.Values{}
	for k, vs := range qv {
		if k != "X-Amz-Signature" {
			rest[k] = vs
		}
	}
	u.RawQuery = rest.Encode()
	unsigned.URL = &u
	empty := sha256.Sum256(nil)
	for _, hash := range []string{unsignedPayload, hex.EncodeToString(empty[:])} {
		canonical := canonicalRequest(&unsigned, s.signedHeaders, hash)
		for _, secret := range secrets {
			want := signature(secret, s, date, canonical)
			if subtle.ConstantTimeCompare([]byte(want), []byte(s.signature)) == 1 {
				return p, nil
			}
		}
	}
	return none, newErr(kSignatureDoesNotMatch, "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// signature computes the SigV4 signature of a canonical request.
func signature(secret string, s sigV4, date, canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	scope := s.date + "/" + s.region + "/" + s.service + "/aws4_request"
	toSign := sigAlgorithm + "\n" + date + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	k := hmacSHA256([]byte("AWS4"+secret), s.date)
	k = hmacSHA256(k, s.region)
	k = hmacSHA256(k, s.service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, toSign))
}

// canonicalRequest builds the SigV4 canonical request of r over the given signed headers.
func canonicalRequest(r *http.Request, signed []string, payloadHash string) string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	b.WriteString(uriEncode(path, false))
	b.WriteByte('\n')
	b.WriteString(canonicalQuery(r.URL.RawQuery))
	b.WriteByte('\n')
	for _, name := range signed {
		b.WriteString(name)
		b.WriteByte(':')
		b.WriteString(headerValue(r, name))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(strings.Join(signed, ";"))
	b.WriteByte('\n')
	b.WriteString(payloadHash)
	return b.String()
}

func headerValue(r *http.Request, name string) string {
	switch name {
	case "host":
		return r.Host
	case "content-length":
		if v := r.Header.Get("Content-Length"); v != "" {
			return v
		}
		if r.ContentLength >= 0 {
			return strconv.FormatInt(r.ContentLength, 10)
		}
	}
	vals := r.Header.Values(name)
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(out, ",")
}

func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		vs := slices.Clone(vals[k])
		slices.Sort(vs)
		for _, v := range vs {
			parts = append(parts, uriEncode(k, true)+"="+uriEncode(v, true))
		}
	}
	return strings.Join(parts, "&")
}

// uriEncode percent-encodes every byte but the unreserved characters (and '/', unless
// encodeSlash), as SigV4 requires.
func uriEncode(s string, encodeSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}
