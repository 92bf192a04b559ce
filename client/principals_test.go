package client_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/okiba/okiba/api"
	"github.com/okiba/okiba/client"
	"github.com/okiba/okiba/okibatest"
)

func TestPrincipalsThroughTheClient(t *testing.T) {
	t.Parallel()
	srv := okibatest.New(t, okibatest.Options{Token: "admin-token-0123456789abcdef"})
	cl := srv.Client
	ctx := context.Background()
	srv.CreateQueue(t, "orders")

	made, err := cl.CreatePrincipal(ctx, "shop", "send queue:orders")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(made.Secret, "okiba_") || made.Principal.Name != "shop" || !slices.Equal(made.Principal.Grants, []string{"send queue:orders"}) {
		t.Fatalf("created %+v", made)
	}
	shop, err := client.New(srv.URL, client.Options{Token: made.Secret})
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	if _, err := shop.Send(ctx, "orders", client.Message{Body: []byte("x")}); err != nil {
		t.Fatalf("a send it was granted: %v", err)
	}
	if _, err := shop.Receive(ctx, "orders", client.ReceiveOptions{}); !client.IsCode(err, api.CodeForbidden) {
		t.Fatalf("a receive it was not granted: %v", err)
	}
	if _, err := shop.Principals(ctx); !client.IsCode(err, api.CodeForbidden) {
		t.Fatalf("listing principals without admin: %v", err)
	}

	p, err := cl.GrantPrincipal(ctx, "shop", "receive queue:orders")
	if err != nil || len(p.Grants) != 2 {
		t.Fatalf("grant: %+v, %v", p, err)
	}
	if _, err := shop.Receive(ctx, "orders", client.ReceiveOptions{}); err != nil {
		t.Fatalf("a receive just granted: %v", err)
	}
	if p, err = cl.RevokePrincipal(ctx, "shop", "receive queue:orders"); err != nil || len(p.Grants) != 1 {
		t.Fatalf("revoke: %+v, %v", p, err)
	}

	rot, err := cl.RotatePrincipal(ctx, "shop", 0)
	if err != nil || rot.Secret == made.Secret || len(rot.Principal.Secrets) != 1 {
		t.Fatalf("rotate with keep 0: %+v, %v", rot, err)
	}
	if _, err := shop.Send(ctx, "orders", client.Message{Body: []byte("x")}); !client.IsCode(err, api.CodeUnauthorized) {
		t.Fatalf("the old secret after a rotation that kept nothing: %v", err)
	}
	rot, err = cl.RotatePrincipal(ctx, "shop", -1)
	if err != nil || len(rot.Principal.Secrets) != 2 || rot.Principal.Secrets[0].ExpiresAt == nil ||
		rot.Principal.Secrets[0].ExpiresAt.Sub(rot.Principal.UpdatedAt) != 24*time.Hour {
		t.Fatalf("rotate with the default keep: %+v, %v", rot, err)
	}

	list, err := cl.Principals(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "shop" || list[1].Name != "admin" || !list[1].Declared {
		t.Fatalf("principals: %+v, %v", list, err)
	}
	if got, err := cl.Principal(ctx, "shop"); err != nil || got.Name != "shop" {
		t.Fatalf("principal: %+v, %v", got, err)
	}
	if err := cl.DeletePrincipal(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Principal(ctx, "shop"); !client.IsCode(err, api.CodePrincipalNotFound) {
		t.Fatalf("a deleted principal: %v", err)
	}
}
