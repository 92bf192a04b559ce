package service

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/okiba/okiba/access"
	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/internal/auth"
)

// Principals: the admin API over the broker's principals (broker/principals.go) and the
// keyring's declared ones (auth.Keyring). The log holds principals made through the API;
// the configuration declares the others, which only it can change. Every method needs
// admin (the route table checks it too: the console, say, calls these directly).
//
// A secret is made here (auth.NewSecret), sealed with the keyring and stored sealed; the
// answer of a create or a rotation is the only place it appears in the clear.

// requireAdmin checks that the caller may manage principals.
func requireAdmin(ctx context.Context) error {
	return auth.Require(ctx, access.Admin, access.Resource{})
}

// parseGrants reads grants as the API gives them ("send queue:orders-*").
func parseGrants(texts []string) ([]access.Grant, error) {
	out := make([]access.Grant, 0, len(texts))
	for _, s := range texts {
		g, err := access.ParseGrant(s)
		if err != nil {
			return nil, fmt.Errorf("grants: %w", err)
		}
		out = append(out, g)
	}
	return out, nil
}

func wireGrants(gs access.Grants) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.String()
	}
	return out
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func wirePrincipal(p access.Principal) api.Principal {
	out := api.Principal{Name: p.Name, Grants: wireGrants(p.Grants), Secrets: make([]api.PrincipalSecret, len(p.Secrets)),
		CreatedAt: msTime(p.Created), UpdatedAt: msTime(p.Updated)}
	for i, s := range p.Secrets {
		out.Secrets[i] = api.PrincipalSecret{ID: strconv.FormatUint(s.ID, 10), CreatedAt: msTime(s.Created)}
		if s.Expires != 0 {
			t := msTime(s.Expires)
			out.Secrets[i].ExpiresAt = &t
		}
	}
	return out
}

func wireDeclared(p access.Principal) api.Principal {
	return api.Principal{Name: p.Name, Grants: wireGrants(p.Grants), Declared: true, Secrets: []api.PrincipalSecret{}}
}

// declared returns the declared principal of that name, if there is one.
func (s *Service) declared(name string) (access.Principal, bool) {
	if s.keys == nil || !s.keys.Declared(name) {
		return access.Principal{}, false
	}
	for _, p := range s.keys.DeclaredPrincipals() {
		if p.Name == name {
			return p, true
		}
	}
	return access.Principal{}, false
}

// notDeclared refuses a change to a declared principal: its grants and secret live in
// the configuration, and a change made here would be hidden by it.
func (s *Service) notDeclared(name string) error {
	if _, ok := s.declared(name); ok {
		return &access.InvalidError{Field: "name", Reason: fmt.Sprintf("principal %q is declared in the server's configuration: change or remove it there (and restart), not through the API", name)}
	}
	return nil
}

// errNoKeys answers what needs to seal a secret on a service given no keyring.
func errNoKeys() *api.Error {
	return &api.Error{Code: api.CodeUnavailable, Message: "this server keeps no principals' secrets (it was started without a keyring): principals cannot be created or rotated here"}
}

// CreatePrincipal makes a principal with a fresh secret and its grants, and returns the
// secret with it.
func (s *Service) CreatePrincipal(ctx context.Context, in api.CreatePrincipalRequest) (api.IssuedSecret, *api.Error) {
	if err := requireAdmin(ctx); err != nil {
		return api.IssuedSecret{}, s.errorOf(err)
	}
	if err := access.CheckName(in.Name); err != nil {
		return api.IssuedSecret{}, s.errorOf(err)
	}
	grants, err := parseGrants(in.Grants)
	if err != nil {
		return api.IssuedSecret{}, s.errorOf(err)
	}
	if _, ok := s.declared(in.Name); ok {
		return api.IssuedSecret{}, s.errorOf(fmt.Errorf("%w: %q is declared in the server's configuration", access.ErrExists, in.Name))
	}
	if s.keys == nil {
		return api.IssuedSecret{}, errNoKeys()
	}
	secret := auth.NewSecret()
	p, err := s.b.CreatePrincipal(ctx, in.Name, grants, s.keys.Seal(in.Name, secret))
	if err != nil {
		return api.IssuedSecret{}, s.errorOf(err)
	}
	return api.IssuedSecret{Principal: wirePrincipal(p), Secret: secret}, nil
}

// Principals lists the log's principals, then the declared ones (marked so), each by
// name. A log principal hidden by a declared one of the same name is left out: the
// declared one is the one that signs in.
func (s *Service) Principals(ctx context.Context) (api.PrincipalList, *api.Error) {
	if err := requireAdmin(ctx); err != nil {
		return api.PrincipalList{}, s.errorOf(err)
	}
	logged, _ := s.b.Principals()
	out := api.PrincipalList{Principals: make([]api.Principal, 0, len(logged))}
	for _, p := range logged {
		if _, ok := s.declared(p.Name); !ok {
			out.Principals = append(out.Principals, wirePrincipal(p))
		}
	}
	if s.keys != nil {
		for _, p := range s.keys.DeclaredPrincipals() {
			out.Principals = append(out.Principals, wireDeclared(p))
		}
	}
	return out, nil
}

// Principal returns one principal, declared or of the log.
func (s *Service) Principal(ctx context.Context, name string) (api.Principal, *api.Error) {
	if err := requireAdmin(ctx); err != nil {
		return api.Principal{}, s.errorOf(err)
	}
	if err := access.CheckName(name); err != nil {
		return api.Principal{}, s.errorOf(err)
	}
	if p, ok := s.declared(name); ok {
		return wireDeclared(p), nil
	}
	p, err := s.b.Principal(name)
	if err != nil {
		return api.Principal{}, s.errorOf(err)
	}
	return wirePrincipal(p), nil
}

// DeletePrincipal removes a principal of the log: its secrets stop being valid at once.
func (s *Service) DeletePrincipal(ctx context.Context, name string) *api.Error {
	if err := s.checkChange(ctx, name); err != nil {
		return s.errorOf(err)
	}
	if err := s.b.DeletePrincipal(ctx, name); err != nil {
		return s.errorOf(err)
	}
	return nil
}

// checkChange is what every change to a principal checks first: admin, the name, and
// that the principal is not declared.
func (s *Service) checkChange(ctx context.Context, name string) error {
	if err := requireAdmin(ctx); err != nil {
		return err
	}
	if err := access.CheckName(name); err != nil {
		return err
	}
	return s.notDeclared(name)
}

// GrantPrincipal adds grants to a principal of the log.
func (s *Service) GrantPrincipal(ctx context.Context, name string, in api.GrantsRequest) (api.Principal, *api.Error) {
	return s.changeGrants(ctx, name, in, s.b.GrantPrincipal)
}

// RevokePrincipal removes grants from a principal of the log; a grant it does not hold
// is no error.
func (s *Service) RevokePrincipal(ctx context.Context, name string, in api.GrantsRequest) (api.Principal, *api.Error) {
	return s.changeGrants(ctx, name, in, s.b.RevokePrincipal)
}

func (s *Service) changeGrants(ctx context.Context, name string, in api.GrantsRequest,
	change func(context.Context, string, []access.Grant) (access.Principal, error)) (api.Principal, *api.Error) {
	if err := s.checkChange(ctx, name); err != nil {
		return api.Principal{}, s.errorOf(err)
	}
	if len(in.Grants) == 0 {
		return api.Principal{}, Invalid("grants is required: give at least one, such as \"send queue:orders-*\"")
	}
	grants, err := parseGrants(in.Grants)
	if err != nil {
		return api.Principal{}, s.errorOf(err)
	}
	p, err := change(ctx, name, grants)
	if err != nil {
		return api.Principal{}, s.errorOf(err)
	}
	return wirePrincipal(p), nil
}

// RotatePrincipal gives a principal of the log a new secret and returns it; its current
// secrets stay valid for in.Keep (api.DefaultRotateKeep when not given; 0 ends them, and
// the console sessions signed in with them, now).
func (s *Service) RotatePrincipal(ctx context.Context, name string, in api.RotateRequest) (api.IssuedSecret, *api.Error) {
	if err := s.checkChange(ctx, name); err != nil {
		return api.IssuedSecret{}, s.errorOf(err)
	}
	keep := api.DefaultRotateKeep
	if in.Keep != nil {
		keep = in.Keep.D()
	}
	if keep < 0 {
		return api.IssuedSecret{}, Invalid("keep must not be negative, got %v: give how long the old secret stays valid, or 0s to end it now", keep)
	}
	if s.keys == nil {
		return api.IssuedSecret{}, errNoKeys()
	}
	secret := auth.NewSecret()
	p, err := s.b.RotatePrincipal(ctx, name, s.keys.Seal(name, secret), keep)
	if err != nil {
		return api.IssuedSecret{}, s.errorOf(err)
	}
	return api.IssuedSecret{Principal: wirePrincipal(p), Secret: secret}, nil
}
