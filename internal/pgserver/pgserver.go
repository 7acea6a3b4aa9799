// Package pgserver starts a throwaway PostgreSQL server from the binaries
// installed on the machine, for tests and for `make demo`. The server listens
// only on a unix socket in its own temporary directory and trusts local
// connections; it is meant to be thrown away.
package pgserver

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Superuser is the role initdb creates in a throwaway server. Not "ptah":
// with a schema named like the role, "$user" in the default search_path
// would send a test's unqualified CREATE TABLE into ptah's own schema.
const Superuser = "postgres"

// Server is a running throwaway server.
type Server struct {
	Dir    string // holds the data directory and the socket
	BinDir string
	cred   *syscall.Credential
}

// EnvBinDir names the variable that chooses the server binaries: a
// directory holding initdb, pg_ctl and postgres, such as a major installed by
// `make pg-versions` (.cache/pg/<major>/bin).
const EnvBinDir = "PTAH_TEST_PG_BINDIR"

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found: install them " +
	"(Debian/Ubuntu: apt-get install postgresql) or put initdb and pg_ctl on PATH, " +
	"or set " + EnvBinDir + " to a directory holding them (make pg-versions installs one per major), " +
	"or point PTAH_TEST_DATABASE_URL at a server where this role may create databases")

// FindBinDir returns the directory holding initdb and pg_ctl: the one
// PTAH_TEST_PG_BINDIR names, else PATH, else the newest
// /usr/lib/postgresql/<major>/bin.
func FindBinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", EnvBinDir, dir, err)
			}
		}
		return filepath.Abs(dir)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		// Distributions link initdb onto PATH; the other binaries (pg_dump
		// of the same major) sit beside the real file.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Option changes a setting of the server Start starts.
type Option func(settings map[string]string)

// Setting sets a server configuration parameter (postgres -c name=value),
// replacing Start's own value for it, if any.
func Setting(name, value string) Option {
	return func(s map[string]string) { s[name] = value }
}

// StockLimits gives the server PostgreSQL's default connection and lock
// limits: max_connections 100, max_locks_per_transaction 64 and
// max_prepared_transactions 0, so a shared lock table of 6,400 objects.
// Without it Start raises max_connections to 300 for the parallel tests,
// which also triples the lock table and hides what a stock server refuses.
func StockLimits() Option {
	return func(s map[string]string) {
		s["max_connections"] = "100"
		s["max_locks_per_transaction"] = "64"
		s["max_prepared_transactions"] = "0"
	}
}

// Start initialises a cluster in a new temporary directory and starts it.
// initdb refuses to run as root, so as root the server runs as the
// "postgres" user (or "nobody") and owns its directory.
func Start(opts ...Option) (*Server, error) {
	bin, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	// Unix socket paths are limited to about 107 bytes: keep the dir short.
	dir, err := os.MkdirTemp("/tmp", "ptahpg")
	if err != nil {
		return nil, fmt.Errorf("creating server directory: %w", err)
	}
	s := &Server{Dir: dir, BinDir: bin}
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.cred = cred
		if err := usableBy(bin, cred); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("handing %s to the server user: %w", dir, err)
		}
	}
	if err := s.run("initdb", "-D", s.dataDir(), "-U", Superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.run("pg_ctl", "start", "-w", "-t", "60", "-D", s.dataDir(),
		"-l", filepath.Join(dir, "server.log"), "-o", serverOptions(dir, opts)); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w\nserver log:\n%s", err, log)
	}
	return s, nil
}

// serverOptions are the postgres command-line settings: Start's own, then
// the options', in a stable order.
func serverOptions(dir string, opts []Option) string {
	settings := map[string]string{
		"listen_addresses":        "''",
		"unix_socket_directories": dir,
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		"max_connections":         "300",
		"shared_buffers":          "128MB",
	}
	for _, o := range opts {
		o(settings)
	}
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	args := make([]string, len(names))
	for i, name := range names {
		args[i] = "-c " + name + "=" + settings[name]
	}
	return strings.Join(args, " ")
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

// URL returns a connection URL for database db as the superuser.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + db}
	u.RawQuery = url.Values{"host": {s.Dir}, "sslmode": {"disable"}}.Encode()
	return u.String()
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	err := s.run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", s.dataDir())
	if rmErr := os.RemoveAll(s.Dir); err == nil {
		err = rmErr
	}
	return err
}

func (s *Server) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.BinDir, name), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Dir = s.Dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and initdb refuses root: no 'postgres' or 'nobody' user to run the server as")
}

// usableBy checks that the server user can reach and run the binaries in
// bin: initdb and the server run as that user, and a directory under a
// root-only home (or an install without a+rX) fails with a bare
// "permission denied" otherwise.
func usableBy(bin string, cred *syscall.Credential) error {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return err
	}
	hint := fmt.Sprintf("the server runs as uid %d, which cannot %%s %%s: make the binaries and every directory above them readable and searchable by it (chmod a+rX), or install them elsewhere", cred.Uid)
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		if !permits(dir, cred, 1) {
			return fmt.Errorf(hint, "enter", dir)
		}
		if dir == "/" {
			break
		}
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		p := filepath.Join(real, name)
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if !permits(p, cred, 5) {
			return fmt.Errorf(hint, "run", p)
		}
	}
	if !permits(real, cred, 5) {
		return fmt.Errorf(hint, "read", real)
	}
	return nil
}

// permits reports whether the user cred may access path with the
// permission bits want (4 read, 2 write, 1 execute/search), going by the
// mode's owner, group or other bits as the kernel does (supplementary
// groups aside).
func permits(path string, cred *syscall.Credential, want uint32) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false
	}
	perm := st.Mode & 0o777
	switch {
	case st.Uid == cred.Uid:
		perm >>= 6
	case st.Gid == cred.Gid:
		perm >>= 3
	}
	return perm&want == want
}
