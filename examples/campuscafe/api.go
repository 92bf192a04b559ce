package campuscafe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/okiba/okiba/outbox"
	"github.com/okiba/okiba/reconcile"
)

// Handler is the café's HTTP API (README.md shows it with curl):
//
//	POST /orders              {"customer":"aiko","item":"latte","qty":2} → 201 the order
//	POST /orders/{id}/pay     → 200 {"order":…,"paid":true}; paying again changes nothing ("paid":false)
//	GET  /orders              the latest orders (?limit=, default 50)
//	GET  /inventory           reserved quantity per item: the idempotent projection and the naive one
//	GET  /points              points per customer: the idempotent ledger and the naive one
//	GET  /status              consumers, relays, gateway, chaos knobs, broker
//	PUT  /chaos               {"ack_fail_rate":0.5,"crash_rate":0.05,"duplicate_rate":0.2} (any subset)
//	POST /broker/restart      restart the embedded broker
//	POST /reconcile           rebuild the projections from the orders; ?dry_run=true only reports drift
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", a.placeOrder)
	mux.HandleFunc("POST /orders/{id}/pay", a.payOrder)
	mux.HandleFunc("GET /orders", a.listOrders)
	mux.HandleFunc("GET /inventory", func(w http.ResponseWriter, r *http.Request) {
		a.pair(w, r, a.Store.Inventory)
	})
	mux.HandleFunc("GET /points", func(w http.ResponseWriter, r *http.Request) {
		a.pair(w, r, a.Store.Points)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Status(r.Context()))
	})
	mux.HandleFunc("PUT /chaos", a.setChaos)
	mux.HandleFunc("POST /broker/restart", func(w http.ResponseWriter, r *http.Request) {
		if a.Broker == nil {
			writeError(w, http.StatusConflict, "the broker is not embedded (--server): restart it yourself")
			return
		}
		if err := a.Broker.Restart(); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"restarted": true, "restarts": a.Broker.Restarts()})
	})
	mux.HandleFunc("POST /reconcile", a.reconcile)
	return mux
}

func (a *App) placeOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ID       string `json:"id"`
		Customer string `json:"customer"`
		Item     string `json:"item"`
		Qty      int    `json:"qty"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "body must be JSON like {\"customer\":\"aiko\",\"item\":\"latte\",\"qty\":2}: "+err.Error())
		return
	}
	if in.Qty == 0 {
		in.Qty = 1
	}
	if in.ID == "" {
		b := make([]byte, 6)
		rand.Read(b)
		in.ID = "o-" + hex.EncodeToString(b)
	}
	o, err := a.Store.PlaceOrder(r.Context(), in.ID, in.Customer, in.Item, in.Qty)
	if err != nil {
		status := http.StatusBadRequest
		if strings.Contains(err.Error(), "insert order") {
			status = http.StatusConflict
		}
		writeError(w, status, err.Error())
		return
	}
	a.Kick()
	writeJSON(w, http.StatusCreated, o)
}

func (a *App) payOrder(w http.ResponseWriter, r *http.Request) {
	o, paid, err := a.Store.PayOrder(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "no order "+r.PathValue("id"))
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	a.Kick()
	writeJSON(w, http.StatusOK, map[string]any{"order": o, "paid": paid})
}

func (a *App) listOrders(w http.ResponseWriter, r *http.Request) {
	limit := 50
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "limit must be 1..1000")
			return
		}
		limit = n
	}
	os, err := a.Store.Orders(r.Context(), limit)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if os == nil {
		os = []Order{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"orders": os})
}

func (a *App) pair(w http.ResponseWriter, r *http.Request, get func(ctx context.Context, naive bool) (map[string]int64, error)) {
	good, err := get(r.Context(), false)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	naive, err := get(r.Context(), true)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"idempotent": good, "naive": naive})
}

// Chaos are the fault rates, as JSON.
type Chaos struct {
	AckFailRate   *float64 `json:"ack_fail_rate,omitempty"`
	CrashRate     *float64 `json:"crash_rate,omitempty"`
	DuplicateRate *float64 `json:"duplicate_rate,omitempty"`
}

func (a *App) chaos() Chaos {
	f := func(v float64) *float64 { return &v }
	return Chaos{AckFailRate: f(a.AckFail.Get()), CrashRate: f(a.Crash.Get()), DuplicateRate: f(a.Duplicate.Get())}
}

func (a *App) setChaos(w http.ResponseWriter, r *http.Request) {
	var in Chaos
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<12))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, `body must be JSON like {"ack_fail_rate":0.8,"crash_rate":0.05,"duplicate_rate":0.2}: `+err.Error())
		return
	}
	for _, v := range []*float64{in.AckFailRate, in.CrashRate, in.DuplicateRate} {
		if v != nil && (*v < 0 || *v > 1) {
			writeError(w, http.StatusBadRequest, "rates are probabilities between 0 and 1")
			return
		}
	}
	if in.AckFailRate != nil {
		a.AckFail.Set(*in.AckFailRate)
	}
	if in.CrashRate != nil {
		a.Crash.Set(*in.CrashRate)
	}
	if in.DuplicateRate != nil {
		a.Duplicate.Set(*in.DuplicateRate)
	}
	writeJSON(w, http.StatusOK, a.chaos())
}

// Status is what GET /status answers.
type Status struct {
	Broker    string            `json:"broker"`
	Embedded  bool              `json:"embedded"`
	Restarts  int64             `json:"broker_restarts"`
	Database  string            `json:"database"`
	Pending   int64             `json:"outbox_pending"`
	Relays    outbox.RelayStats `json:"relays"`
	Injected  int64             `json:"duplicates_injected"`
	Consumers []ConsumerStats   `json:"consumers"`
	Gateway   GatewayStats      `json:"gateway"`
	Chaos     Chaos             `json:"chaos"`
}

// Status reports the café's counters.
func (a *App) Status(ctx context.Context) Status {
	s := Status{Broker: a.url, Embedded: a.Broker != nil, Database: a.Store.Dialect.Name(),
		Relays: a.RelayStats(), Injected: a.Injected(), Gateway: a.Gateway.Stats(), Chaos: a.chaos()}
	if a.Broker != nil {
		s.Restarts = a.Broker.Restarts()
	}
	s.Pending, _ = a.Store.Outbox.Pending(ctx)
	for _, c := range a.consumers {
		s.Consumers = append(s.Consumers, c.Stats())
	}
	return s
}

func (a *App) reconcile(w http.ResponseWriter, r *http.Request) {
	dry := r.URL.Query().Get("dry_run") == "true"
	var b strings.Builder
	for _, p := range a.Store.Projections() {
		if dry {
			d, err := reconcile.Check(r.Context(), a.Store.DB, p)
			if err != nil {
				writeError(w, http.StatusInternalServerError, err.Error())
				return
			}
			reconcile.WriteDrift(&b, d, 5)
			continue
		}
		rep, err := reconcile.Rebuild(r.Context(), a.Store.DB, p)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		rep.Write(&b, 5)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(b.String()))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
