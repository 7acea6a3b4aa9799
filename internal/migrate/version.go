package migrate

import (
	"cmp"
	"fmt"
	"strings"
)

// Version is a migration's version: the text its file name spells, and a
// canonical numeric form under which versions are ordered and compared.
//
// A version is one or more runs of decimal digits separated by dots or
// underscores ("1", "0002", "20240101120000", "1.2.3", "1_2"). It is read
// as a sequence of numbers of any size, compared segment by segment, so
// 10 follows 9 and 1.10 follows 1.9; leading zeros and trailing zero
// segments are not significant, so "0002" is 2 and "1.0" is 1, as Flyway
// has it. Two files of one version are duplicates, however they spell it.
type Version struct {
	text string
	key  string // segments without leading zeros, joined by '.', trailing ".0"s removed
}

// ParseVersion reads a version as written in a file name or a history row.
func ParseVersion(s string) (Version, error) {
	if s == "" {
		return Version{}, fmt.Errorf("%w: empty", ErrBadVersion)
	}
	segs := strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '_' })
	if len(segs) == 0 || strings.Count(s, ".")+strings.Count(s, "_") != len(segs)-1 {
		return Version{}, fmt.Errorf("%w: %q: separators must sit between digits", ErrBadVersion, s)
	}
	for i, seg := range segs {
		if strings.Trim(seg, "0123456789") != "" {
			return Version{}, fmt.Errorf("%w: %q: only digits, dots and underscores", ErrBadVersion, s)
		}
		segs[i] = strings.TrimLeft(seg, "0")
		if segs[i] == "" {
			segs[i] = "0"
		}
	}
	for len(segs) > 1 && segs[len(segs)-1] == "0" {
		segs = segs[:len(segs)-1]
	}
	return Version{text: s, key: strings.Join(segs, ".")}, nil
}

// String is the version as written.
func (v Version) String() string { return v.text }

// Canonical is the numeric form: two versions are the same version exactly
// when their canonical forms are equal ("0002" and "2" are both "2"; Flyway's
// "1_2" and "1.2" are both "1.2").
func (v Version) Canonical() string { return v.key }

// IsZero reports whether v is the zero Version, which no file has.
func (v Version) IsZero() bool { return v.key == "" }

// Compare orders versions numerically, segment by segment: it returns -1
// when v comes before w, 0 when they are the same version, +1 after.
func (v Version) Compare(w Version) int {
	a, b := strings.Split(v.key, "."), strings.Split(w.key, ".")
	for i := 0; i < len(a) || i < len(b); i++ {
		if c := compareNumber(segment(a, i), segment(b, i)); c != 0 {
			return c
		}
	}
	return 0
}

func segment(segs []string, i int) string {
	if i < len(segs) {
		return segs[i]
	}
	return "0"
}

// compareNumber compares two decimal numbers without leading zeros. They
// are compared as text rather than parsed, so that no version is too long
// to order: a longer number is the larger one.
func compareNumber(a, b string) int {
	if c := cmp.Compare(len(a), len(b)); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// MarshalText writes the version as written, so that plans and JSON
// output show what the file name says.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.text), nil }

// UnmarshalText reads a version as ParseVersion does.
func (v *Version) UnmarshalText(b []byte) error {
	parsed, err := ParseVersion(string(b))
	if err != nil {
		return err
	}
	*v = parsed
	return nil
}
