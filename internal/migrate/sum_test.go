package migrate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestSumRoundTrip(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	write(t, d, "10_c.sql", "SELECT 3;\n")
	write(t, d, "1_a.sql", "SELECT 1;\n")
	write(t, d, "2_b.sql", "SELECT 2;\n")
	written, err := WriteSum(d, LayoutDetect)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(d, SumFile))
	if err != nil {
		t.Fatal(err)
	}
	// One line per file in version order, each checksum that of sha256sum.
	body := "1_a.sql sha256:" + sha("SELECT 1;\n") + "\n" +
		"2_b.sql sha256:" + sha("SELECT 2;\n") + "\n" +
		"10_c.sql sha256:" + sha("SELECT 3;\n") + "\n"
	// The total is the hash of the lines below it, as written.
	want := "total sha256:" + sha(body) + "\n" + body
	if string(data) != want {
		t.Errorf("ptah.sum:\n%s\nwant:\n%s", data, want)
	}
	if !written.HasSum || string(written.Sum()) != want || written.Digest() != "sha256:"+sha(body) {
		t.Errorf("WriteSum's source: HasSum %v, Digest %s", written.HasSum, written.Digest())
	}
	src, err := ReadDir(d, LayoutDetect)
	if err != nil {
		t.Fatalf("reading what the sum was written for: %v", err)
	}
	if !src.HasSum {
		t.Error("HasSum is false with a ptah.sum")
	}

	// Rewriting it after an edit is what `ptah migrate hash` is for: the
	// old sum is not compared.
	write(t, d, "2_b.sql", "SELECT 22;\n")
	if _, err := ReadDir(d, LayoutDetect); !errors.Is(err, ErrSumMismatch) {
		t.Fatalf("reading an edited file: %v, want ErrSumMismatch", err)
	}
	if _, err := WriteSum(d, LayoutDetect); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDir(d, LayoutDetect); err != nil {
		t.Errorf("after rewriting the sum: %v", err)
	}
	if entries, _ := os.ReadDir(d); len(entries) != 4 {
		t.Errorf("the directory holds %d entries, want the three files and ptah.sum (no temporary file left)", len(entries))
	}
}

func TestWriteSumRefusesABadDirectory(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	write(t, d, "1_a.sql", "SELECT 1;")
	write(t, d, "01_b.sql", "SELECT 2;")
	_, err := WriteSum(d, LayoutDetect)
	checkProblems(t, err, problem{is: ErrDuplicateVersion, path: "1_a.sql"})
	if _, err := os.Stat(filepath.Join(d, SumFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a sum was written for a directory with problems: %v", err)
	}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// withSum is fsys and the ptah.sum of its files, read before edit changed
// them.
func withSum(t *testing.T, fsys fstest.MapFS, edit func(fstest.MapFS)) fstest.MapFS {
	t.Helper()
	src, err := Read(fsys, LayoutDetect)
	if err != nil {
		t.Fatal(err)
	}
	out := maps.Clone(fsys)
	edit(out)
	if _, ok := out[SumFile]; !ok {
		out[SumFile] = &fstest.MapFile{Data: src.Sum()}
	}
	return out
}

func TestSumMismatch(t *testing.T) {
	t.Parallel()
	base := dir("1_a.sql", "2_b.sql", "3_c.sql")
	sumOf := func(fsys fstest.MapFS) []byte {
		src, err := Read(fsys, LayoutDetect)
		if err != nil {
			t.Fatal(err)
		}
		return src.Sum()
	}
	for _, tt := range []struct {
		name string
		edit func(fstest.MapFS)
		want []problem
	}{
		{"edited", func(m fstest.MapFS) { m["2_b.sql"] = &fstest.MapFile{Data: []byte("SELECT 'changed';")} },
			[]problem{{is: ErrSumMismatch, path: "2_b.sql", says: []string{"edited"}}}},
		{"edited by a newline only", func(m fstest.MapFS) { m["1_a.sql"] = &fstest.MapFile{Data: append(m["1_a.sql"].Data, '\n')} },
			[]problem{{is: ErrSumMismatch, path: "1_a.sql", says: []string{"edited"}}}},
		{"added", func(m fstest.MapFS) { m["4_d.sql"] = &fstest.MapFile{Data: []byte("SELECT 4;")} },
			[]problem{{is: ErrSumMismatch, path: "4_d.sql", says: []string{"added"}}}},
		{"removed", func(m fstest.MapFS) { delete(m, "2_b.sql") },
			[]problem{{is: ErrSumMismatch, path: "2_b.sql", says: []string{"removed", "line 3"}}}},
		{"renamed", func(m fstest.MapFS) { m["2_bee.sql"] = m["2_b.sql"]; delete(m, "2_b.sql") },
			[]problem{{is: ErrSumMismatch, path: "2_bee.sql", says: []string{"renamed from 2_b.sql"}}}},
		{"reordered by a new version", func(m fstest.MapFS) { m["4_a.sql"] = m["1_a.sql"]; delete(m, "1_a.sql") },
			[]problem{{is: ErrSumMismatch, path: "4_a.sql", says: []string{"renamed from 1_a.sql", "order"}}}},
		{"swapped contents", func(m fstest.MapFS) { m["1_a.sql"], m["3_c.sql"] = m["3_c.sql"], m["1_a.sql"] },
			[]problem{
				{is: ErrSumMismatch, path: "1_a.sql", says: []string{"edited"}},
				{is: ErrSumMismatch, path: "3_c.sql", says: []string{"edited"}},
			}},
		{"lines reordered by hand, total recomputed", func(m fstest.MapFS) {
			lines := strings.SplitAfter(string(sumOf(base)), "\n")
			body := lines[1] + lines[3] + lines[2]
			m[SumFile] = &fstest.MapFile{Data: []byte("total sha256:" + sha(body) + "\n" + body)}
		}, []problem{
			{is: ErrSumMismatch, path: "2_b.sql", says: []string{"another order"}},
			{is: ErrSumMismatch, path: "3_c.sql", says: []string{"another order"}},
		}},
		{"a line edited by hand, not the total", func(m fstest.MapFS) {
			s := string(sumOf(base))
			i := strings.Index(s, "2_b.sql sha256:") + len("2_b.sql sha256:")
			m[SumFile] = &fstest.MapFile{Data: []byte(s[:i] + strings.Repeat("0", 64) + s[i+64:])}
		}, []problem{
			{is: ErrSumMismatch, path: SumFile, line: 1, says: []string{"edited by hand"}},
			{is: ErrSumMismatch, path: "2_b.sql", says: []string{"edited"}},
		}},
		{"every kind at once", func(m fstest.MapFS) {
			m["1_a.sql"] = &fstest.MapFile{Data: []byte("SELECT 'changed';")}
			delete(m, "2_b.sql")
			m["4_d.sql"] = &fstest.MapFile{Data: []byte("SELECT 4;")}
		}, []problem{
			{is: ErrSumMismatch, path: "1_a.sql", says: []string{"edited"}},
			{is: ErrSumMismatch, path: "2_b.sql", says: []string{"removed"}},
			{is: ErrSumMismatch, path: "4_d.sql", says: []string{"added"}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(withSum(t, base, tt.edit), LayoutDetect)
			checkProblems(t, err, tt.want...)
			if err != nil && !strings.Contains(err.Error(), "ptah migrate hash") {
				t.Errorf("the error does not say how to rewrite the sum:\n%v", err)
			}
		})
	}
}

func TestSumMalformed(t *testing.T) {
	t.Parallel()
	base := dir("1_a.sql", "2_b.sql")
	valid := func() string {
		src, err := Read(base, LayoutDetect)
		if err != nil {
			t.Fatal(err)
		}
		return string(src.Sum())
	}()
	for _, tt := range []struct {
		name, sum string
		want      []problem
	}{
		{"empty", "", []problem{{is: ErrBadSum, path: SumFile, line: 1}}},
		{"no total", strings.SplitN(valid, "\n", 2)[1], []problem{{is: ErrBadSum, path: SumFile, line: 1, says: []string{"first line"}}}},
		{"a line without a checksum", valid + "3_c.sql\n", []problem{{is: ErrBadSum, path: SumFile, line: 4}}},
		{"a short checksum", valid + "3_c.sql sha256:abc\n", []problem{{is: ErrBadSum, path: SumFile, line: 4}}},
		{"another hash", valid + "3_c.sql md5:d41d8cd98f00b204e9800998ecf8427e\n", []problem{{is: ErrBadSum, path: SumFile, line: 4}}},
		{"a file listed twice", valid + strings.Split(valid, "\n")[1] + "\n", []problem{{is: ErrBadSum, path: SumFile, line: 4, says: []string{"line 2"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fsys := maps.Clone(base)
			fsys[SumFile] = &fstest.MapFile{Data: []byte(tt.sum)}
			_, err := Read(fsys, LayoutDetect)
			checkProblems(t, err, tt.want...)
		})
	}

	// A checkout that turned line ends into CRLF still matches.
	fsys := maps.Clone(base)
	fsys[SumFile] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(valid, "\n", "\r\n"))}
	if src, err := Read(fsys, LayoutDetect); err != nil || !src.HasSum {
		t.Errorf("a CRLF ptah.sum: %v", err)
	}
}

// A file that cannot be read is reported as what it is, not also as a sum
// mismatch.
func TestSumNotComparedWithBrokenFiles(t *testing.T) {
	t.Parallel()
	fsys := withSum(t, dir("1_a.sql", "2_b.sql"), func(m fstest.MapFS) {
		m["2_b.sql"] = &fstest.MapFile{Data: []byte("-- emptied\n")}
	})
	_, err := Read(fsys, LayoutDetect)
	checkProblems(t, err, problem{is: ErrNoStatements, path: "2_b.sql"})
}
