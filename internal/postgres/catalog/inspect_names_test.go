package catalog

import (
	"strings"
	"testing"
)

// The names PostgreSQL 18 gave these NOT NULL constraints (and 17 this
// domain's), read from real servers.
func TestDefaultNotNullName(t *testing.T) {
	cases := []struct{ rel, col, want string }{
		{"people", "email", "people_email_not_null"},
		{"people", "a_column_name_long_enough_that_the_default_name_is_cut_short",
			"people_a_column_name_long_enough_that_the_default_name_not_null"},
		{strings.Repeat("é", 31), strings.Repeat("ñ", 27), strings.Repeat("é", 13) + "_" + strings.Repeat("ñ", 13) + "_not_null"},
		{"code", "", "code_not_null"},
		{"a_domain_name_that_is_long_enough_to_be_cut_by_the_limit_yes", "",
			"a_domain_name_that_is_long_enough_to_be_cut_by_the_lim_not_null"},
	}
	for _, c := range cases {
		if got := defaultNotNullName(c.rel, c.col); got != c.want {
			t.Errorf("defaultNotNullName(%q, %q) = %q, want %q", c.rel, c.col, got, c.want)
		}
	}
}
