package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// cast is a column type change the plan makes with USING col::to.
type cast struct {
	column    ID
	attribute string // the attribute converted, when the column is of a composite type
	from, to  string // format_type of the old and new types
}

func (c cast) what() string {
	if c.attribute != "" {
		return describe(c.column) + " (attribute " + ident(c.attribute) + ")"
	}
	return describe(c.column)
}

// checkCasts asks the server, in the dev database (where the declared types
// exist), whether each of the plan's column conversions has a cast. One
// that has none would fail whatever the data, and no schema file can
// declare the USING expression it needs: it is refused by name.
//
// The check parses "SELECT NULL::from::to" without running it. An old type
// the dev database does not have (a type the plan drops) cannot be checked
// there; the plan keeps such a conversion as it is.
func checkCasts(ctx context.Context, dev *pgx.Conn, casts []cast) error {
	var refused []string
	for _, c := range casts {
		_, err := dev.Prepare(ctx, "", "SELECT NULL::"+c.from+"::"+c.to)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
		case errors.As(err, &pgErr) && pgErr.Code == "42846": // cannot_coerce
			refused = append(refused, fmt.Sprintf("%s: %s to %s", c.what(), c.from, c.to))
		case errors.As(err, &pgErr) && pgErr.Code == "42704": // undefined_object: the old type
		default:
			return fmt.Errorf("checking the conversion of %s from %s to %s: %w", c.what(), c.from, c.to, err)
		}
	}
	return refusePlan(refused, "PostgreSQL has no cast for these column type changes: ALTER COLUMN ... TYPE would fail whatever the data, "+
		"and a schema file cannot declare the USING expression they need. Make each change in two steps "+
		"(declare a new column of the new type and fill it from the old one, then drop the old one), "+
		"or convert the column with a migration; then plan again")
}
