package migrate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SumFile is the integrity file of a migration directory.
//
// Its first line is "total sha256:<hex>", then one line per migration, in
// version order: "<path> sha256:<hex of the file's bytes>". The total is
// the SHA-256 of those lines exactly as written (each ending in a
// newline), so `tail -n +2 ptah.sum | sha256sum` checks it by hand and a
// change to a file is a one-line diff.
const SumFile = "ptah.sum"

// Sum is the contents of ptah.sum for the source's files.
func (s *Source) Sum() []byte { return renderSum(sumLines(s.Files)) }

// Digest is the total of the source's ptah.sum (whether or not the
// directory holds one): a fingerprint of every migration's path and
// contents, in order.
func (s *Source) Digest() string { return sumTotal(sumLines(s.Files)) }

// WriteSum reads the migrations of dir in layout, as ReadDir does but
// without comparing them with an existing ptah.sum, and writes ptah.sum
// for them. A directory with problems gets no sum.
func WriteSum(dir string, layout Layout) (*Source, error) {
	src, err := read(os.DirFS(dir), dir, layout, false)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, SumFile), src.Sum()); err != nil {
		return nil, fmt.Errorf("writing %s in %s: %w", SumFile, dir, err)
	}
	src.HasSum = true
	return src, nil
}

// writeFileAtomic replaces path with data, so that a crash leaves the old
// file or the new one and never half of one.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// sumEntry is one file's line of a sum.
type sumEntry struct {
	path, checksum string
	line           int // in ptah.sum; 0 for an entry made from a file
}

func sumLines(files []*File) []sumEntry {
	entries := make([]sumEntry, len(files))
	for i, f := range files {
		entries[i] = sumEntry{path: f.Path, checksum: f.Checksum}
	}
	return entries
}

func sumBody(entries []sumEntry) []byte {
	var b bytes.Buffer
	for _, e := range entries {
		b.WriteString(e.path + " " + e.checksum + "\n")
	}
	return b.Bytes()
}

func sumTotal(entries []sumEntry) string {
	h := sha256.Sum256(sumBody(entries))
	return checksumPrefix + hex.EncodeToString(h[:])
}

func renderSum(entries []sumEntry) []byte {
	return append([]byte("total "+sumTotal(entries)+"\n"), sumBody(entries)...)
}

// parseSum reads ptah.sum. Line ends may be CRLF (a checkout on Windows):
// the total is checked against the lines as ptah writes them.
func parseSum(data []byte, ps *problems) (total string, entries []sumEntry, ok bool) {
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	bad := func(line int, format string, args ...any) {
		ps.add(line, fmt.Errorf("%w: "+format+"; run `ptah migrate hash` to write it again", append([]any{ErrBadSum}, args...)...), SumFile)
		ok = false
	}
	ok = true
	first, found := strings.CutPrefix(strings.TrimSuffix(lines[0], "\r"), "total ")
	if !found || !isChecksum(first) {
		bad(1, "the first line is not %q", "total sha256:<hex>")
	}
	seen := map[string]int{}
	for i, line := range lines[1:] {
		n := i + 2
		line = strings.TrimSuffix(line, "\r")
		cut := strings.LastIndexByte(line, ' ')
		if cut <= 0 || !isChecksum(line[cut+1:]) {
			bad(n, "not %q", "<path> sha256:<hex>")
			continue
		}
		path := line[:cut]
		if prev, dup := seen[path]; dup {
			bad(n, "%s is listed on line %d too", path, prev)
			continue
		}
		seen[path] = n
		entries = append(entries, sumEntry{path: path, checksum: line[cut+1:], line: n})
	}
	return first, entries, ok
}

func isChecksum(s string) bool {
	h, ok := strings.CutPrefix(s, checksumPrefix)
	if !ok || len(h) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// verifySum compares files with ptah.sum, naming each file that differs:
// edited, added, removed, renamed (the same contents under another path,
// which may be another version) or listed in another order.
func verifySum(fsys fs.FS, files []*File, ps *problems) {
	data, err := fs.ReadFile(fsys, SumFile)
	if err != nil {
		ps.add(0, fmt.Errorf("%w: reading: %w", ErrBadSum, err), SumFile)
		return
	}
	total, recorded, ok := parseSum(data, ps)
	if !ok {
		return
	}
	if total != sumTotal(recorded) {
		ps.add(1, fmt.Errorf("%w: the total does not match the lines below it: the file was edited by hand", ErrSumMismatch), SumFile)
	}
	compareSum(recorded, sumLines(files), ps)
}

// compareSum reports how the files (want, in version order) differ from
// the lines of ptah.sum (got, in its order).
func compareSum(recorded, current []sumEntry, ps *problems) {
	inSum := map[string]sumEntry{}
	for _, e := range recorded {
		inSum[e.path] = e
	}
	inDir := map[string]bool{}
	var added []sumEntry
	for _, e := range current {
		inDir[e.path] = true
		r, ok := inSum[e.path]
		switch {
		case !ok:
			added = append(added, e)
		case r.checksum != e.checksum:
			ps.add(0, fmt.Errorf("%w: edited since %s was written", ErrSumMismatch, SumFile), e.path)
		}
	}
	var removed []sumEntry
	for _, r := range recorded {
		if !inDir[r.path] {
			removed = append(removed, r)
		}
	}
	reportMoves(added, removed, ps)
	reportOrder(recorded, current, inDir, inSum, ps)
}

// reportMoves pairs an added file with a removed one of the same contents
// (a rename) and reports the rest as added or removed.
func reportMoves(added, removed []sumEntry, ps *problems) {
	for _, a := range added {
		i := indexChecksum(removed, a.checksum)
		if i < 0 {
			ps.add(0, fmt.Errorf("%w: added since %s was written", ErrSumMismatch, SumFile), a.path)
			continue
		}
		ps.add(0, fmt.Errorf("%w: renamed from %s (line %d of %s) since it was written, which may change its version and so the order migrations run in",
			ErrSumMismatch, removed[i].path, removed[i].line, SumFile), a.path)
		removed = append(removed[:i], removed[i+1:]...)
	}
	for _, r := range removed {
		ps.add(0, fmt.Errorf("%w: removed since %s was written (it is line %d there)", ErrSumMismatch, SumFile, r.line), r.path)
	}
}

func indexChecksum(entries []sumEntry, checksum string) int {
	for i, e := range entries {
		if e.checksum == checksum {
			return i
		}
	}
	return -1
}

// reportOrder names the files both sides hold that ptah.sum lists in
// another order than the one they run in.
func reportOrder(recorded, current []sumEntry, inDir map[string]bool, inSum map[string]sumEntry, ps *problems) {
	var a, b []string
	for _, e := range recorded {
		if inDir[e.path] {
			a = append(a, e.path)
		}
	}
	for _, e := range current {
		if _, ok := inSum[e.path]; ok {
			b = append(b, e.path)
		}
	}
	for i := range a {
		if a[i] != b[i] {
			ps.add(0, fmt.Errorf("%w: listed in another order in %s (line %d) than the order migrations run in", ErrSumMismatch, SumFile, inSum[b[i]].line), b[i])
		}
	}
}
