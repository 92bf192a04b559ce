package sns

import (
	"bytes"
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/okiba/okiba/broker"
	"github.com/okiba/okiba/internal/names"
	"github.com/okiba/okiba/queue"
	"github.com/okiba/okiba/topic"
)

// Delivery as SNS delivers to SQS. A message an SNS subscription put into a queue is the
// native record (topic.MessagePayload); when an SQS client receives it, Deliver gives it
// the shape SNS would have: with RawMessageDelivery, the message as the body and its
// attributes as the SQS message's, with their data types; without, the JSON envelope
// (Type, MessageId, TopicArn, Subject, Message, Timestamp, SignatureVersion,
// Signature, SigningCertURL, UnsubscribeURL, MessageAttributes) as the body and no
// attributes. The envelope is a function of the record, so every receive of one message
// gets the same bytes, and every subscription's copy of one publish the same MessageId.
//
// The signature is SNS's: SHA1withRSA (SignatureVersion 1) or SHA256withRSA (2, a topic
// attribute) over "Message\n…\nMessageId\n…\n[Subject\n…\n]Timestamp\n…\nTopicArn\n…\n
// Type\nNotification\n", with an RSA key derived from the node's data directory secret
// (signer), whose self-signed certificate okiba serves at SigningCertURL.

// maxRawAttributes is what SQS takes on a message; a raw delivery of more is refused by
// SQS on AWS, and SNS then hands the message to the subscription's dead-letter queue or
// drops it. okiba does the same when the message is received (rawUndeliverable).
const maxRawAttributes = 10

// certPrefix begins the path of the signing certificate.
const certPrefix = "/sns/SimpleNotificationService-"

type signer struct {
	key  *rsa.PrivateKey
	pem  []byte
	path string // where the certificate is served
}

// signer returns the front's signer, made on first use (finding the primes takes a
// moment).
func (f *Front) signer() (*signer, error) {
	f.signOnce.Do(func() { f.sign, f.signErr = newSigner(f.opts.SigningSeed) })
	return f.sign, f.signErr
}

// newSigner derives a 2048-bit RSA key from seed: its primes are the first probable
// primes at or after numbers drawn from an HMAC-SHA256 stream keyed by seed, so the same
// data directory gives the same key, and so the same certificate URL, after every
// restart.
func newSigner(seed []byte) (*signer, error) {
	stream := drbg{key: seed}
	e := big.NewInt(65537)
	prime := func() *big.Int {
		for {
			b := stream.read(128)
			b[0] |= 0xc0
			b[127] |= 1
			p := new(big.Int).SetBytes(b)
			for i := 0; i < 1<<16; i++ {
				if p.ProbablyPrime(32) && new(big.Int).GCD(nil, nil, new(big.Int).Sub(p, big.NewInt(1)), e).Cmp(big.NewInt(1)) == 0 {
					return p
				}
				p.Add(p, big.NewInt(2))
			}
		}
	}
	p := prime()
	q := prime()
	for p.Cmp(q) == 0 {
		q = prime()
	}
	n := new(big.Int).Mul(p, q)
	one := big.NewInt(1)
	phi := new(big.Int).Mul(new(big.Int).Sub(p, one), new(big.Int).Sub(q, one))
	d := new(big.Int).ModInverse(e, phi)
	if d == nil {
		return nil, errors.New("sns: derived primes give no private exponent")
	}
	key := &rsa.PrivateKey{PublicKey: rsa.PublicKey{N: n, E: 65537}, D: d, Primes: []*big.Int{p, q}}
	key.Precompute()
	if err := key.Validate(); err != nil {
		return nil, fmt.Errorf("sns: derived signing key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	fp := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber: new(big.Int).SetBytes(fp[:16]),
		Subject:      pkix.Name{CommonName: "okiba SNS message signing", Organization: []string{"okiba"}},
		NotBefore:    time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2120, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(&drbg{key: fp[:]}, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sns: signing certificate: %w", err)
	}
	return &signer{key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		path: certPrefix + hex.EncodeToString(fp[:8]) + ".pem"}, nil
}

// drbg is a deterministic byte stream: HMAC-SHA256(key, counter) blocks.
type drbg struct {
	key []byte
	n   uint64
	buf []byte
}

func (d *drbg) read(n int) []byte {
	out := make([]byte, n)
	_, _ = d.Read(out)
	return out
}

func (d *drbg) Read(p []byte) (int, error) {
	for i := range p {
		if len(d.buf) == 0 {
			m := hmac.New(sha256.New, d.key)
			var c [8]byte
			binary.BigEndian.PutUint64(c[:], d.n)
			d.n++
			m.Write([]byte("okiba sns signing key\x00"))
			m.Write(c[:])
			d.buf = m.Sum(nil)
		}
		p[i] = d.buf[0]
		d.buf = d.buf[1:]
	}
	return len(p), nil
}

// IsCertRequest reports whether r asks for the signing certificate, which anyone may
// fetch (a validator fetches it unauthenticated, as from AWS).
func (f *Front) IsCertRequest(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(r.URL.Path, certPrefix) && !r.URL.Query().Has("Action")
}

// ServeCert answers the signing certificate.
func (f *Front) ServeCert(w http.ResponseWriter, r *http.Request) {
	s, err := f.signer()
	if err != nil {
		f.opts.Logger.Error("sns: signing key", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if r.URL.Path != s.path {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(s.pem)
}

// CertificatePEM is the signing certificate, for tests and operators.
func (f *Front) CertificatePEM() ([]byte, error) {
	s, err := f.signer()
	if err != nil {
		return nil, err
	}
	return s.pem, nil
}

// envelope is SNS's notification, its members in the order SNS writes them.
type envelope struct {
	Type              string                   `json:"Type"`
	MessageID         string                   `json:"MessageId"`
	SequenceNumber    string                   `json:"SequenceNumber,omitempty"`
	TopicArn          string                   `json:"TopicArn"`
	Subject           string                   `json:"Subject,omitempty"`
	Message           string                   `json:"Message"`
	Timestamp         string                   `json:"Timestamp"`
	SignatureVersion  string                   `json:"SignatureVersion"`
	Signature         string                   `json:"Signature"`
	SigningCertURL    string                   `json:"SigningCertURL"`
	UnsubscribeURL    string                   `json:"UnsubscribeURL"`
	MessageAttributes map[string]envelopeValue `json:"MessageAttributes,omitempty"`
}

type envelopeValue struct {
	Type  string `json:"Type"`
	Value string `json:"Value"`
}

// StringToSign is what SNS signs of a notification.
func (e *envelope) stringToSign() string {
	var b strings.Builder
	add := func(k, v string) { b.WriteString(k + "\n" + v + "\n") }
	add("Message", e.Message)
	add("MessageId", e.MessageID)
	if e.Subject != "" {
		add("Subject", e.Subject)
	}
	add("Timestamp", e.Timestamp)
	add("TopicArn", e.TopicArn)
	add("Type", e.Type)
	return b.String()
}

// Deliver shapes a message an SNS subscription put into queue as SNS delivers it (see
// the comment above); other messages pass unchanged. It reports false for a raw
// delivery SQS would refuse, which it has moved to the subscription's dead-letter
// queue or dropped.
func (f *Front) Deliver(r *http.Request, queueName string, m *broker.Message) bool {
	topicName := attrValue(&m.Payload, topic.HeaderTopic)
	if topicName == "" {
		return true
	}
	ctx := r.Context()
	ti, err := f.b.Topic(topicName)
	if err != nil || attrValue(&m.Payload, topic.HeaderRecordID) == "" {
		return true
	}
	subs, err := f.b.Subscriptions(topicName)
	if err != nil {
		return true
	}
	var sub *broker.SubscriptionInfo
	for i := range subs {
		if subs[i].Queue == queueName && strings.HasPrefix(subs[i].Name, subPrefix) {
			sub = &subs[i]
			break
		}
	}
	if sub == nil {
		return true // a native subscription's message: as okiba delivers it
	}
	v, err := f.viewOf(ctx, ti, sub.SubscriptionInfo)
	if err != nil {
		f.opts.Logger.Error("sns: reading subscription attributes", "topic", topicName, "subscription", sub.Name, "error", err)
		return true
	}
	attrs := snsAttributes(&m.Payload)
	p := queue.Payload{Group: m.Payload.Group, DedupID: m.Payload.DedupID}
	if v.raw {
		if len(attrs) > maxRawAttributes {
			f.rawUndeliverable(ctx, queueName, m, v, attrs)
			return false
		}
		p.Body = m.Payload.Body
		for _, a := range attrs {
			val := []byte(a.Value)
			if strings.HasPrefix(a.Type, "Binary") {
				val, _ = base64.StdEncoding.DecodeString(a.Value)
			}
			p.Attrs = append(p.Attrs, queue.Attr{Name: a.Name, Type: a.Type, Value: val})
		}
		m.Payload = p
		return true
	}
	body, err := f.envelopeOf(r, ti, sub.Name, m, attrs)
	if err != nil {
		f.opts.Logger.Error("sns: signing an envelope", "error", err)
		return true
	}
	p.Body = body
	m.Payload = p
	return true
}

// envelopeOf builds and signs the envelope of m.
func (f *Front) envelopeOf(r *http.Request, ti topic.TopicInfo, subName string, m *broker.Message, attrs []attribute) ([]byte, error) {
	s, err := f.signer()
	if err != nil {
		return nil, err
	}
	base := f.opts.BaseURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	sigVersion := "1"
	if a, err := f.attrs(r.Context(), topicKey(ti.Name), ti.ID, 0); err == nil && a["SignatureVersion"] == "2" {
		sigVersion = "2"
	}
	e := envelope{
		Type:             "Notification",
		MessageID:        messageID(attrValue(&m.Payload, topic.HeaderRecordID)),
		TopicArn:         f.topicARN(ti.Name),
		Subject:          attrValue(&m.Payload, headerSubject),
		Message:          string(m.Payload.Body),
		Timestamp:        m.EnqueuedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
		SignatureVersion: sigVersion,
		SigningCertURL:   base + s.path,
		UnsubscribeURL:   base + "/?Action=Unsubscribe&SubscriptionArn=" + url.QueryEscape(f.subARN(ti.Name, subName)),
	}
	if names.IsFIFO(ti.Name) {
		e.SequenceNumber = "0"
		if off := attrValue(&m.Payload, topic.HeaderOffset); off != "" {
			var n uint64
			fmt.Sscan(off, &n)
			e.SequenceNumber = sequenceNumber(n)
		}
	}
	if len(attrs) > 0 {
		e.MessageAttributes = make(map[string]envelopeValue, len(attrs))
		for _, a := range attrs {
			e.MessageAttributes[a.Name] = envelopeValue{Type: a.Type, Value: a.Value}
		}
	}
	var sig []byte
	if sigVersion == "2" {
		sum := sha256.Sum256([]byte(e.stringToSign()))
		sig, err = rsa.SignPKCS1v15(nil, s.key, crypto.SHA256, sum[:])
	} else {
		sum := sha1.Sum([]byte(e.stringToSign()))
		sig, err = rsa.SignPKCS1v15(nil, s.key, crypto.SHA1, sum[:])
	}
	if err != nil {
		return nil, err
	}
	e.Signature = base64.StdEncoding.EncodeToString(sig)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&e); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// rawUndeliverable settles a raw delivery SQS would refuse (more than ten attributes):
// into the subscription's RedrivePolicy dead-letter queue, else nowhere, as SNS; then it
// deletes the message from the queue. A failure leaves the message leased, to be
// received, and tried, again.
func (f *Front) rawUndeliverable(ctx context.Context, queueName string, m *broker.Message, v subView, attrs []attribute) {
	log := f.opts.Logger.With("queue", queueName, "attributes", len(attrs))
	if rp := v.attrs["RedrivePolicy"]; rp != "" {
		var pol struct {
			Target string `json:"deadLetterTargetArn"`
		}
		_ = json.Unmarshal([]byte(rp), &pol)
		dlq, e := f.queueOfEndpoint(pol.Target)
		if e == nil {
			p := m.Payload.Clone()
			if names.IsFIFO(dlq) && p.Group == "" {
				p.Group = "sns"
			}
			if res, err := f.b.Send(ctx, dlq, []queue.SendInput{{Payload: *p, Delay: -1}}); err != nil || res[0].Err != nil {
				log.Warn("sns: a raw delivery with too many attributes could not go to the dead-letter queue; it stays", "dlq", dlq, "error", errors.Join(err, res0(res)))
				return
			}
		}
	} else {
		log.Warn("sns: a raw delivery with more than 10 attributes was dropped, as SQS refuses it and the subscription has no RedrivePolicy")
	}
	if _, err := f.b.Ack(ctx, queueName, []string{m.Receipt}); err != nil {
		log.Warn("sns: could not delete an undeliverable raw message", "error", err)
	}
}

func res0(res []queue.SendResult) error {
	if len(res) == 0 {
		return nil
	}
	return res[0].Err
}

// attrValue is the value of the attribute name of p, or "".
func attrValue(p *queue.Payload, name string) string {
	for _, a := range p.Attrs {
		if a.Name == name {
			return string(a.Value)
		}
	}
	return ""
}

// snsAttributes are a record's message attributes as SNS carries them: its headers but
// okiba's own, with the data types the publish kept (String when none).
func snsAttributes(p *queue.Payload) []attribute {
	var types map[string]string
	if t := attrValue(p, headerTypes); t != "" {
		_ = json.Unmarshal([]byte(t), &types)
	}
	var out []attribute
	for _, a := range p.Attrs {
		if slices.ContainsFunc(ownHeaders, func(p string) bool { return strings.HasPrefix(a.Name, p) }) {
			continue
		}
		typ := types[a.Name]
		if typ == "" {
			typ = "String"
		}
		out = append(out, attribute{Name: a.Name, Type: typ, Value: string(a.Value)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
