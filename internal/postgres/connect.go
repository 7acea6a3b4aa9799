package postgres

import (
	"context"
	"errors"
	"fmt"
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
