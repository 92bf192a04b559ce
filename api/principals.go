package api

import "time"

// Principals: who may call the server, and what each may do (docs/api.md "Principals",
// docs/security.md). A principal's secret is its bearer token, its SQS secret access
// key and its console password; the server shows it once, when it makes it.

// Principal is one principal as the admin API shows it: never with a secret.
type Principal struct {
	Name string `json:"name"`
	// Grants are "PERMISSION PATTERN" texts, such as "send queue:orders-*" or "admin *".
	Grants []string `json:"grants"`
	// Declared: the principal comes from the server's configuration (its file, the
	// --auth-token's "admin", the SQS credentials), which alone can change it; it has no
	// secrets or times here.
	Declared  bool              `json:"declared,omitempty"`
	Secrets   []PrincipalSecret `json:"secrets"`
	CreatedAt time.Time         `json:"created_at,omitzero"`
	UpdatedAt time.Time         `json:"updated_at,omitzero"`
}

// PrincipalSecret describes one of a principal's secrets, without the secret: two are
// valid at once during a rotation, the old one until ExpiresAt.
type PrincipalSecret struct {
	ID        string     `json:"id"` // decimal
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// PrincipalList answers GET /v1/principals: the principals of the log, then those of
// the configuration, each by name.
type PrincipalList struct {
	Principals []Principal `json:"principals"`
}

// CreatePrincipalRequest is the body of POST /v1/principals.
type CreatePrincipalRequest struct {
	Name   string   `json:"name"`
	Grants []string `json:"grants,omitempty"`
}

// GrantsRequest is the body of POST /v1/principals/{name}/grant and …/revoke.
type GrantsRequest struct {
	Grants []string `json:"grants"`
}

// RotateRequest is the body of POST /v1/principals/{name}/rotate (it may be empty).
type RotateRequest struct {
	// Keep is how long the principal's current secrets stay valid beside the new one.
	// Defaults to DefaultRotateKeep; 0s ends them now.
	Keep *Duration `json:"keep,omitempty"`
}

// DefaultRotateKeep is how long a rotation keeps the old secret valid when the request
// does not say: a day for the principal's programs to move to the new one.
const DefaultRotateKeep = 24 * time.Hour

// IssuedSecret answers a create or a rotation: the principal and its new secret, which
// the server shows this once and keeps only sealed.
type IssuedSecret struct {
	Principal Principal `json:"principal"`
	Secret    string    `json:"secret"`
}
