package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/okiba/okiba/access"
)

// SecretPrefix begins every secret okiba makes, so that secret scanners recognise one
// in a commit or a log.
const SecretPrefix = "okiba_"

// MinSecretLength is the shortest secret okiba accepts from its configuration (the
// --auth-token, a declared principal's secret): 22 characters, 128 bits when they are
// random base64. The secrets okiba makes are 160 random bits.
const MinSecretLength = 22

// CheckSecret says what is wrong with a secret given in the configuration, if anything.
func CheckSecret(s string) error {
	switch {
	case strings.TrimSpace(s) != s:
		return errors.New("has surrounding whitespace, which no client would send: remove it")
	case strings.ContainsAny(s, " \t\r\n"):
		return errors.New("contains whitespace: use letters, digits and punctuation")
	case len(s) < MinSecretLength:
		return fmt.Errorf("is %d characters; okiba requires at least %d (128 bits of randomness; `okiba token` makes one)", len(s), MinSecretLength)
	}
	for _, c := range s {
		if c < 0x21 || c > 0x7e {
			return errors.New("must be printable ASCII")
		}
	}
	return nil
}

var secretEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewSecret returns a fresh secret: the prefix and 160 random bits.
func NewSecret() string {
	var b [20]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return SecretPrefix + secretEncoding.EncodeToString(b[:])
}

// Static is a principal of the node's configuration rather than its log: the
// --auth-token's admin, the principals of the configuration file, the SQS access keys
// of sqs.credentials. Its secret lives in the configuration.
type Static struct {
	Name   string
	Secret string
	Grants access.Grants
}

// Source is where a keyring reads the log's principals (the broker).
type Source interface {
	Principals() ([]access.Principal, uint64)
	PrincipalChanges() uint64
}

// Keyring finds the principal a secret proves. It holds every valid secret in the
// clear, in memory only: the log holds them sealed (AES-256-GCM under a key derived from
// the data directory's secret), as SigV4 needs the secret itself, not a hash of it.
// Lookups rebuild it when the source's principals have changed.
type Keyring struct {
	aead   cipher.AEAD
	src    Source
	static []Static
	now    func() time.Time
	log    *slog.Logger

	mu      sync.RWMutex
	built   bool
	changes uint64
	byHash  map[[sha256.Size]byte]holder
	byName  map[string]*named
}

// holder is one secret's principal.
type holder struct {
	name     string
	secretID uint64
	expires  int64 // Unix ms, 0 = never
}

type named struct {
	grants  access.Grants
	static  bool
	secrets []openSecret
}

type openSecret struct {
	id      uint64
	clear   string
	expires int64
}

func (s openSecret) valid(now int64) bool { return s.expires == 0 || now < s.expires }

// NewKeyring returns the keyring of src's principals and the static ones, sealing with
// sealKey (32 bytes). A static principal's name hides a log principal of the same name.
func NewKeyring(sealKey []byte, src Source, static []Static, now func() time.Time, log *slog.Logger) (*Keyring, error) {
	block, err := aes.NewCipher(sealKey)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seen := map[string]bool{}
	for _, s := range static {
		if err := access.CheckName(s.Name); err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("principal %q is declared twice", s.Name)
		}
		seen[s.Name] = true
	}
	return &Keyring{aead: aead, src: src, static: static, now: now, log: log}, nil
}

func sealAAD(name string) []byte { return []byte("okiba principal secret v1\x00" + name) }

// Seal encrypts a secret of the principal name for the log.
func (k *Keyring) Seal(name, secret string) []byte {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(secret)+k.aead.Overhead())
	_, _ = rand.Read(nonce)
	return k.aead.Seal(nonce, nonce, []byte(secret), sealAAD(name))
}

func (k *Keyring) open(name string, sealed []byte) (string, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("sealed secret too short")
	}
	clear, err := k.aead.Open(nil, sealed[:n], sealed[n:], sealAAD(name))
	return string(clear), err
}

// Declared reports whether name is a static principal's.
func (k *Keyring) Declared(name string) bool {
	for _, s := range k.static {
		if s.Name == name {
			return true
		}
	}
	return false
}

// staticID is the secret id of a static principal's secret: changing the secret in the
// configuration ends the console sessions signed in with the old one. The top bit keeps
// it apart from the log's ids.
func staticID(s Static) uint64 {
	h := sha256.Sum256([]byte(s.Name + "\x00" + s.Secret))
	return 1<<63 | binary.BigEndian.Uint64(h[:8])>>1
}

// current returns the keyring's tables, rebuilt if the source has changed since.
func (k *Keyring) current() (map[[sha256.Size]byte]holder, map[string]*named) {
	changes := uint64(0)
	if k.src != nil {
		changes = k.src.PrincipalChanges()
	}
	k.mu.RLock()
	if k.built && k.changes == changes {
		h, n := k.byHash, k.byName
		k.mu.RUnlock()
		return h, n
	}
	k.mu.RUnlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	var list []access.Principal
	if k.src != nil {
		list, changes = k.src.Principals()
	}
	if k.built && k.changes == changes {
		return k.byHash, k.byName
	}
	byHash := map[[sha256.Size]byte]holder{}
	byName := map[string]*named{}
	for _, s := range k.static {
		id := staticID(s)
		byName[s.Name] = &named{grants: s.Grants, static: true, secrets: []openSecret{{id: id, clear: s.Secret}}}
		byHash[sha256.Sum256([]byte(s.Secret))] = holder{name: s.Name, secretID: id}
	}
	for _, p := range list {
		if byName[p.Name] != nil {
			continue // a static principal of the same name hides it
		}
		n := &named{grants: p.Grants}
		for _, s := range p.Secrets {
			clear, err := k.open(p.Name, s.Sealed)
			if err != nil {
				k.log.Error("a principal's secret cannot be unsealed (another data directory's key?): it is not accepted", "principal", p.Name, "secret_id", s.ID, "error", err)
				continue
			}
			n.secrets = append(n.secrets, openSecret{id: s.ID, clear: clear, expires: s.Expires})
			byHash[sha256.Sum256([]byte(clear))] = holder{name: p.Name, secretID: s.ID, expires: s.Expires}
		}
		byName[p.Name] = n
	}
	k.byHash, k.byName, k.changes, k.built = byHash, byName, changes, true
	return byHash, byName
}

// ByToken returns the principal whose valid secret token is.
func (k *Keyring) ByToken(token string) (Principal, bool) {
	byHash, byName := k.current()
	h, ok := byHash[sha256.Sum256([]byte(token))]
	if !ok || !(openSecret{expires: h.expires}).valid(k.now().UnixMilli()) {
		return Principal{}, false
	}
	return Principal{Name: h.name, Method: Token, Grants: byName[h.name].grants, SecretID: h.secretID}, true
}

// SigningSecrets returns the principal an SQS access key id names and its valid
// secrets (two during a rotation), for a signature to be checked against.
func (k *Keyring) SigningSecrets(keyID string) (Principal, []string, bool) {
	_, byName := k.current()
	n, ok := byName[keyID]
	if !ok {
		return Principal{}, nil, false
	}
	now := k.now().UnixMilli()
	var out []string
	for _, s := range n.secrets {
		if s.valid(now) {
			out = append(out, s.clear)
		}
	}
	return Principal{Name: keyID, Method: Signature, Grants: n.grants}, out, len(out) > 0
}

// Session returns the principal of a console session signed in with the secret
// secretID, if that secret is still valid: a rotation's end, a deletion or a new static
// secret ends the sessions it made.
func (k *Keyring) Session(name string, secretID uint64) (Principal, bool) {
	_, byName := k.current()
	n, ok := byName[name]
	if !ok {
		return Principal{}, false
	}
	now := k.now().UnixMilli()
	for _, s := range n.secrets {
		if s.id == secretID && s.valid(now) {
			return Principal{Name: name, Method: Session, Grants: n.grants, SecretID: secretID}, true
		}
	}
	return Principal{}, false
}

// Empty reports whether the keyring holds no principal at all.
func (k *Keyring) Empty() bool {
	_, byName := k.current()
	return len(byName) == 0
}

// DeclaredPrincipals returns the static principals, without their secrets, by order of
// declaration.
func (k *Keyring) DeclaredPrincipals() []access.Principal {
	out := make([]access.Principal, 0, len(k.static))
	for _, s := range k.static {
		out = append(out, access.Principal{Name: s.Name, Grants: slices.Clone(s.Grants)})
	}
	return out
}
