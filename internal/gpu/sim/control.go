package sim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// ControlHandler serves the fault controls over HTTP, so that tests and
// demos can fail a GPU of a running agent started with --simulate. Every
// control is a POST with its arguments in the query:
//
//	POST /xid?gpu=3&xid=79          InjectXID (gi= and ci= for InjectMIGXID)
//	POST /lose?gpu=3                LoseGPU
//	POST /recover?gpu=3             Recover
//	POST /ecc?gpu=3&double=true     InjectECC
//	POST /fail?op=ResetGPU&gpu=3    FailCall (message= sets the error text)
//	POST /fail?op=CreateGPUInstance&gpu=3&profile=3g.40gb&times=1
//	                                FailCreate: profile= and/or times=
//	                                limit a MIG creation fault
//	POST /clear                     ClearFaults
//
// A GET of / lists them. Bad arguments answer 400 naming the argument; a
// control the backend refuses answers 409 with its error. The handler
// must be served on loopback only: it has no authentication.
func (b *Backend) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	post := func(path string, do func(q *controlQuery) error) {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			q := &controlQuery{r: r}
			err := do(q)
			switch {
			case q.err != nil:
				http.Error(w, q.err.Error(), http.StatusBadRequest)
			case err != nil:
				code := http.StatusConflict
				if errors.Is(err, gpu.ErrNotFound) {
					code = http.StatusNotFound
				}
				http.Error(w, err.Error(), code)
			default:
				_, _ = fmt.Fprintln(w, "ok")
			}
		})
	}
	post("/xid", func(q *controlQuery) error {
		index, xid := q.int("gpu", 0, maxControlGPU), q.int("xid", 1, 1<<16)
		gi, ci := q.optInt("gi", -1), q.optInt("ci", -1)
		if q.err != nil {
			return nil
		}
		if gi >= 0 || ci >= 0 {
			return b.InjectMIGXID(index, gi, ci, uint64(xid))
		}
		return b.InjectXID(index, uint64(xid))
	})
	post("/lose", func(q *controlQuery) error {
		index := q.int("gpu", 0, maxControlGPU)
		if q.err != nil {
			return nil
		}
		return b.LoseGPU(index)
	})
	post("/recover", func(q *controlQuery) error {
		index := q.int("gpu", 0, maxControlGPU)
		if q.err != nil {
			return nil
		}
		return b.Recover(index)
	})
	post("/ecc", func(q *controlQuery) error {
		index := q.int("gpu", 0, maxControlGPU)
		double := q.r.URL.Query().Get("double") == "true"
		if q.err != nil {
			return nil
		}
		return b.InjectECC(index, double)
	})
	post("/fail", func(q *controlQuery) error {
		index := q.int("gpu", -1, maxControlGPU)
		args := q.r.URL.Query()
		op := Op(args.Get("op"))
		var err error
		if msg := args.Get("message"); msg != "" {
			err = errors.New(truncateControl(msg))
		}
		profile, times := truncateControl(args.Get("profile")), 0
		if args.Has("times") {
			times = q.int("times", 1, 1<<16)
		}
		if q.err != nil {
			return nil
		}
		if profile != "" || times > 0 {
			return b.FailCreate(op, index, profile, times, err)
		}
		return b.FailCall(op, index, err)
	})
	post("/clear", func(*controlQuery) error {
		b.ClearFaults()
		return nil
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		ops := make([]string, 0, len(Ops()))
		for _, o := range Ops() {
			ops = append(ops, string(o))
		}
		_, _ = fmt.Fprintf(w, `simulated GPU controls of %s (POST):
  /xid?gpu=N&xid=X[&gi=G&ci=C]   an XID event
  /lose?gpu=N                    the GPU falls off the bus (XID 79)
  /recover?gpu=N                 a lost GPU answers again
  /ecc?gpu=N[&double=true]       an ECC error
  /fail?op=OP&gpu=N[&message=M]  calls of OP on the GPU fail; OP is one of %s
  /fail?op=CreateGPUInstance&gpu=N[&profile=P][&times=T][&message=M]
                                 only creating MIG instances of profile P
                                 (or the next T creations) fails
                                 (also op=CreateComputeInstance)
  /clear                         every /fail is cleared
`, b.Name(), strings.Join(ops, ", "))
	})
	return mux
}

// maxControlGPU bounds GPU indexes read from a control request.
const maxControlGPU = 1024

// controlQuery reads a request's arguments; the first bad one is kept in
// err.
type controlQuery struct {
	r   *http.Request
	err error
}

func (q *controlQuery) int(name string, lo, hi int) int {
	s := q.r.URL.Query().Get(name)
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		if q.err == nil {
			q.err = fmt.Errorf("%s: want a whole number from %d to %d, got %q", name, lo, hi, truncateControl(s))
		}
		return 0
	}
	return v
}

func (q *controlQuery) optInt(name string, def int) int {
	if !q.r.URL.Query().Has(name) {
		return def
	}
	return q.int(name, 0, 1<<16)
}

func truncateControl(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
