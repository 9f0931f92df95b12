package cost

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

// TestQueryCredentialsRefused: a 401 is refused credentials, exit 3 as
// for the API server; another refusal is an answer, exit 1.
func TestQueryCredentialsRefused(t *testing.T) {
	for _, tc := range []struct {
		status, code int
		want         string
	}{
		{http.StatusUnauthorized, cliutil.ExitUnreachable, "refused the credentials (HTTP 401)"},
		{http.StatusForbidden, cliutil.ExitFailed, "(HTTP 403) is not the Prometheus API's JSON"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", tc.status)
		}))
		c, err := newClient("http://user:secret@"+strings.TrimPrefix(srv.URL, "http://"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.query(t.Context(), "up", time.Unix(0, 0))
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || cliutil.Code(err) != tc.code || strings.Contains(err.Error(), "secret") {
			t.Errorf("HTTP %d: error %v (code %d), want code %d saying %q without the password", tc.status, err, cliutil.Code(err), tc.code, tc.want)
		}
	}
}

// Answers a Prometheus (or something else at its URL) may give.
func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		want       []float64
		err        string
	}{
		{"vector", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"ml"},"value":[1,"2.5"]},{"metric":{},"value":[1,"NaN"]}]}}`, 200, []float64{2.5}, ""},
		{"refused", `{"status":"error","errorType":"bad_data","error":"parse error"}`, 400, nil, "refused by Prometheus (HTTP 400, bad_data): parse error"},
		{"matrix", `{"status":"success","data":{"resultType":"matrix","result":[]}}`, 200, nil, `is a "matrix"`},
		{"html", `<html>not found</html>`, 404, nil, "(HTTP 404) is not the Prometheus API's JSON"},
		{"short sample", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}`, 200, nil, "without [time, value]"},
		{"number", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}`, 200, nil, "not a string"},
		{"infinite", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"+Inf"]}]}}`, 200, nil, "not a finite number"},
		{"word", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"many"]}]}}`, 200, nil, "not a finite number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode(tc.status, []byte(tc.body))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d samples, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].value != tc.want[i] {
					t.Errorf("sample %d = %v, want %v", i, got[i].value, tc.want[i])
				}
			}
		})
	}
}

// FuzzDecode: whatever answers at --prometheus, decode returns samples
// with finite values or an error, and never panics.
func FuzzDecode(f *testing.F) {
	f.Add(200, []byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"queue":"a"},"value":[1,"0.25"]}]}}`))
	f.Add(400, []byte(`{"status":"error","errorType":"bad_data","error":"x"}`))
	f.Add(200, []byte(`{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1e400"]}]}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		got, err := decode(status, body)
		if err != nil {
			return
		}
		for _, s := range got {
			if s.value != s.value || s.value > 1e308 || s.value < -1e308 {
				t.Fatalf("decoded a value that is not finite: %v", s.value)
			}
		}
	})
}
