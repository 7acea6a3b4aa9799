package migrate

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// dir is a migration directory: each name holds a statement of its own,
// unless given contents (name=contents).
func dir(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for i, n := range names {
		name, sql, ok := strings.Cut(n, "=")
		if !ok {
			sql = "CREATE TABLE t" + string(rune('a'+i)) + " (id int);\n"
		}
		fsys[name] = &fstest.MapFile{Data: []byte(sql)}
	}
	return fsys
}

func paths(src *Source) []string {
	var out []string
	for _, f := range src.Files {
		out = append(out, f.Path)
	}
	return out
}

func TestReadLayouts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		fsys   fstest.MapFS
		layout Layout // given; the test also reads with detection
		want   Layout
		paths  []string
		// versions and names, "<version> <name>" per file
		files []string
	}{
		{
			name: "native integers, numeric order", fsys: dir("10_c.sql", "2_b.sql", "1_a.sql", "9_z.sql"),
			layout: LayoutNative, want: LayoutNative,
			paths: []string{"1_a.sql", "2_b.sql", "9_z.sql", "10_c.sql"},
			files: []string{"1 a", "2 b", "9 z", "10 c"},
		},
		{
			name: "native zero-padded", fsys: dir("0002_users.sql", "0001_init.sql", "0010_more_things.sql"),
			layout: LayoutNative, want: LayoutNative,
			paths: []string{"0001_init.sql", "0002_users.sql", "0010_more_things.sql"},
			files: []string{"0001 init", "0002 users", "0010 more_things"},
		},
		{
			name: "native timestamps", fsys: dir("20240101120000_b.sql", "20231231235959_a.sql", "20240101120001_c.sql"),
			layout: LayoutNative, want: LayoutNative,
			paths: []string{"20231231235959_a.sql", "20240101120000_b.sql", "20240101120001_c.sql"},
			files: []string{"20231231235959 a", "20240101120000 b", "20240101120001 c"},
		},
		{
			name:   "golang-migrate, down files not run",
			fsys:   dir("2_users.up.sql", "2_users.down.sql", "1_init.up.sql", "1_init.down.sql", "10_x.up.sql", "3_.up.sql"),
			layout: LayoutGolangMigrate, want: LayoutGolangMigrate,
			paths: []string{"1_init.up.sql", "2_users.up.sql", "3_.up.sql", "10_x.up.sql"},
			files: []string{"1 init", "2 users", "3 ", "10 x"},
		},
		{
			name:   "flyway, dotted and underscored versions in numeric order, undo files not run",
			fsys:   dir("V2__e.sql", "V1.10__d.sql", "V1_2__c.sql", "V1.1__b.sql", "V1__a.sql", "U1__a.sql", "V1.9__c2.sql"),
			layout: LayoutFlyway, want: LayoutFlyway,
			paths: []string{"V1__a.sql", "V1.1__b.sql", "V1_2__c.sql", "V1.9__c2.sql", "V1.10__d.sql", "V2__e.sql"},
			files: []string{"1 a", "1.1 b", "1_2 c", "1.9 c2", "1.10 d", "2 e"},
		},
		{
			name:   "only .sql files at the root are read",
			fsys:   dir("1_a.sql", "README.md", "notes.txt", ".#2_b.sql", ".3_c.sql", "sub/4_d.sql", "5_e.sql.bak", "6_f.sql"),
			layout: LayoutNative, want: LayoutNative,
			paths: []string{"1_a.sql", "6_f.sql"},
			files: []string{"1 a", "6 f"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, layout := range []Layout{tt.layout, LayoutDetect} {
				src, err := Read(tt.fsys, layout)
				if err != nil {
					t.Fatalf("Read(%q): %v", layout, err)
				}
				if src.Layout != tt.want {
					t.Errorf("Read(%q): layout %q, want %q", layout, src.Layout, tt.want)
				}
				if got := paths(src); !slices.Equal(got, tt.paths) {
					t.Errorf("Read(%q): files %q, want %q", layout, got, tt.paths)
				}
				var got []string
				for _, f := range src.Files {
					got = append(got, f.Version.String()+" "+f.Name)
				}
				if !slices.Equal(got, tt.files) {
					t.Errorf("Read(%q): versions and names %q, want %q", layout, got, tt.files)
				}
				if src.HasSum {
					t.Errorf("Read(%q): HasSum without a ptah.sum", layout)
				}
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	// The checksum is of the exact bytes: CRLFs are not normalized. The
	// expected values come from sha256sum.
	for _, tt := range []struct{ sql, checksum string }{
		{"CREATE TABLE a (id int);\r\nINSERT INTO a VALUES (1);\r\n", "sha256:8bdc244701839d4a8aa8f9fb4df1cd2dca89c32af2903c01ca4150fc066d1421"},
		{"CREATE TABLE a (id int);\nINSERT INTO a VALUES (1);\n", "sha256:953057d3b1f4195b0420b5ae05a41f81e260c77d1f82fb4d3f2af7392ec1ac96"},
	} {
		src, err := Read(dir("1_a.sql="+tt.sql), LayoutDetect)
		if err != nil {
			t.Fatal(err)
		}
		f := src.Files[0]
		if f.Checksum != tt.checksum {
			t.Errorf("checksum of %q: %s, want %s", tt.sql, f.Checksum, tt.checksum)
		}
		if f.SQL != tt.sql || f.Path != "1_a.sql" || f.Name != "a" || f.NoTransaction {
			t.Errorf("file %+v", f)
		}
		if got := statementSQL(f); !slices.Equal(got, []string{"CREATE TABLE a (id int)", "INSERT INTO a VALUES (1)"}) {
			t.Errorf("statements %q", got)
		}
	}
}

func statementSQL(f *File) []string {
	var out []string
	for _, st := range f.Statements {
		out = append(out, st.SQL)
	}
	return out
}

func TestReadDir(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	write(t, d, "2_b.sql", "SELECT 2;")
	write(t, d, "1_a.sql", "SELECT 1;")
	if err := os.Mkdir(filepath.Join(d, "3_sub.sql"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("1_a.sql", filepath.Join(d, "4_link.sql")); err != nil {
		t.Fatal(err)
	}
	src, err := ReadDir(d, LayoutDetect)
	if err != nil {
		t.Fatal(err)
	}
	// A directory named like a migration is not one; a link to a file is.
	if got := paths(src); !slices.Equal(got, []string{"1_a.sql", "2_b.sql", "4_link.sql"}) {
		t.Errorf("files %q", got)
	}

	missing := filepath.Join(d, "nope")
	if _, err := ReadDir(missing, LayoutDetect); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reading a missing directory: %v; want an error naming it", err)
	}
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
