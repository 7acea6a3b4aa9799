package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectError is a failed connection, described without the URL (which
// may hold a password).
type ConnectError struct {
	Database, User, Host string
	Reason               string
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot connect to database %q on %s as role %q: %s", e.Database, e.Host, e.User, e.Reason)
}

func (e *ConnectError) Unwrap() error { return ErrConnect }

// Connect opens a session with search_path set to pg_catalog only, so that
// everything the catalog functions print is schema-qualified.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The parse error repeats the URL: say what is wrong without it.
		return nil, fmt.Errorf("%w: the database URL is not a valid PostgreSQL connection string", ErrConnect)
	}
	cfg.RuntimeParams["search_path"] = "pg_catalog"
	cfg.RuntimeParams["application_name"] = applicationName()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	return ConnectConfig(ctx, cfg)
}

// DefaultSearchPath is the search_path a session of the URL's role gets
// on its database when nothing overrides it (the server's, the database's
// and the role's settings), as SET search_path accepts it. ptah's own
// sessions run with pg_catalog only (Connect); a migration's statements
// run with this one (Plan.SearchPath).
func DefaultSearchPath(ctx context.Context, url string) (string, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "", fmt.Errorf("%w: the database URL is not a valid PostgreSQL connection string", ErrConnect)
	}
	cfg.RuntimeParams["application_name"] = applicationName()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	conn, err := ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var path string
	if err := conn.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil {
		return "", fmt.Errorf("reading the default search_path: %w", err)
	}
	return path, nil
}

// ConnectConfig opens a session with cfg as it is, describing a failure
// without the URL.
func ConnectConfig(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(cfg, err)
	}
	return conn, nil
}

// applicationName names this process in pg_stat_activity, so whoever finds
// a ptah session (a person, or another ptah naming a lock's holder) can tell
// which process it is. PostgreSQL keeps at most 63 bytes of it.
func applicationName() string {
	name := fmt.Sprintf("ptah pid %d", os.Getpid())
	if host, err := os.Hostname(); err == nil && host != "" {
		name += " on " + host
	}
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

func connectError(cfg *pgx.ConnConfig, err error) error {
	var reason string
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		reason = pgErr.Message + " (SQLSTATE " + pgErr.Code + ")"
	} else {
		reason = rootCause(err).Error()
	}
	if cfg.Password != "" {
		reason = strings.ReplaceAll(reason, cfg.Password, "********")
	}
	host := cfg.Host
	if cfg.Port != 0 && !strings.HasPrefix(host, "/") {
		host = fmt.Sprintf("%s:%d", host, cfg.Port)
	}
	return &ConnectError{Database: cfg.Database, User: cfg.User, Host: host, Reason: reason}
}

// rootCause follows the chain of wrapped errors to its end ("connect:
// connection refused"); pgx reports each address it tried, often the same
// cause twice, so only the first branch of a joined error is followed.
func rootCause(err error) error {
	for {
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			if errs := e.Unwrap(); len(errs) > 0 {
				err = errs[0]
				continue
			}
		case interface{ Unwrap() error }:
			if inner := e.Unwrap(); inner != nil {
				err = inner
				continue
			}
		}
		return err
	}
}

// CheckURL reports what is wrong with a connection string, in words that
// never repeat it (it may hold a password): which part does not parse. It
// does no I/O; a nil error says nothing of whether the server is there.
func CheckURL(connString string) error {
	s := strings.TrimSpace(connString)
	if s == "" {
		return errors.New("it is empty")
	}
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		if _, err := url.Parse(s); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				return fmt.Errorf("it is not a valid URL: %v", urlProblem(ue.Err))
			}
			return errors.New("it is not a valid URL")
		}
	} else if strings.Contains(s, "://") {
		return fmt.Errorf("its scheme is not postgres:// or postgresql://")
	}
	if _, err := pgx.ParseConfig(s); err != nil {
		// pgx's message repeats the string (password masked) before a
		// colon; keep only what it says is wrong.
		msg := err.Error()
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			msg = msg[i+3:]
		}
		return fmt.Errorf("it does not parse: %s", msg)
	}
	return nil
}

// urlProblem words net/url's complaint without the text it quotes (a
// password can sit in it).
func urlProblem(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "invalid port"):
		return "the port is not a number"
	case strings.Contains(msg, "invalid userinfo"):
		return "the user or password has a character that must be percent-encoded (such as @, : or /)"
	case strings.Contains(msg, "invalid URL escape"):
		return "a % is not followed by two hex digits"
	case strings.Contains(msg, "invalid character"):
		return "the host has a character a host name cannot have"
	}
	return "it does not parse as a URL"
}
