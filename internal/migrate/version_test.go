package migrate

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, canonical string }{
		{"1", "1"},
		{"0002", "2"},
		{"0", "0"},
		{"000", "0"},
		{"20240101120000", "20240101120000"},
		{"1.2.3", "1.2.3"},
		{"1_2", "1.2"},
		{"1.0", "1"},
		{"1.0.0", "1"},
		{"01.002_0003", "1.2.3"},
		{"99999999999999999999999999", "99999999999999999999999999"},
	} {
		v, err := ParseVersion(tt.in)
		if err != nil {
			t.Errorf("ParseVersion(%q): %v", tt.in, err)
			continue
		}
		if v.String() != tt.in || v.Canonical() != tt.canonical {
			t.Errorf("ParseVersion(%q) = %q, canonical %q; want canonical %q", tt.in, v.String(), v.Canonical(), tt.canonical)
		}
	}
}

func TestParseVersionRefuses(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "a", "1a", ".1", "1.", "1..2", "1__2", "_1", "1-2", "v1", " 1"} {
		if v, err := ParseVersion(in); !errors.Is(err, ErrBadVersion) {
			t.Errorf("ParseVersion(%q) = %q, %v; want ErrBadVersion", in, v.Canonical(), err)
		}
	}
}

func TestVersionOrder(t *testing.T) {
	t.Parallel()
	// Each list is in ascending order; a lexical sort would get each wrong.
	for _, want := range [][]string{
		{"1", "2", "9", "10", "11", "100"},
		{"0001", "2", "0010"},
		{"20231231235959", "20240101120000", "100000000000000"},
		{"1", "1.1", "1.2", "1.9", "1.10", "2", "2.0.1", "10"},
		{"1_1", "1.2", "1_10"},
		{"9", "99999999999999999999", "100000000000000000000"},
	} {
		vs := make([]Version, len(want))
		for i, s := range want {
			vs[i] = mustVersion(t, s)
		}
		slices.Reverse(vs)
		slices.SortFunc(vs, Version.Compare)
		got := make([]string, len(vs))
		for i, v := range vs {
			got[i] = v.String()
		}
		if !slices.Equal(got, want) {
			t.Errorf("sorted %q, want %q", got, want)
		}
	}
}

func TestVersionEquality(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{{"2", "0002"}, {"1.2", "1_2"}, {"1", "1.0"}, {"1.0.0", "01"}} {
		a, b := mustVersion(t, pair[0]), mustVersion(t, pair[1])
		if a.Compare(b) != 0 || b.Compare(a) != 0 || a.Canonical() != b.Canonical() {
			t.Errorf("%q and %q: Compare %d, canonical %q and %q; want the same version", pair[0], pair[1], a.Compare(b), a.Canonical(), b.Canonical())
		}
	}
	if a, b := mustVersion(t, "1.1"), mustVersion(t, "1.01"); a.Compare(b) != 0 {
		t.Errorf("1.1 and 1.01 differ")
	}
	if a, b := mustVersion(t, "1.1"), mustVersion(t, "11"); a.Compare(b) == 0 || a.Canonical() == b.Canonical() {
		t.Errorf("1.1 and 11 are the same version")
	}
}

func mustVersion(t *testing.T, s string) Version {
	t.Helper()
	v, err := ParseVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVersionJSON(t *testing.T) {
	t.Parallel()
	data, err := json.Marshal(struct{ V Version }{mustVersion(t, "0002")})
	if err != nil || string(data) != `{"V":"0002"}` {
		t.Fatalf("json.Marshal = %s, %v", data, err)
	}
	var back struct{ V Version }
	if err := json.Unmarshal(data, &back); err != nil || back.V.String() != "0002" || back.V.Canonical() != "2" {
		t.Errorf("json.Unmarshal = %+v, %v", back.V, err)
	}
	if err := json.Unmarshal([]byte(`{"V":"x"}`), &back); !errors.Is(err, ErrBadVersion) {
		t.Errorf("json.Unmarshal of a bad version: %v", err)
	}
}
