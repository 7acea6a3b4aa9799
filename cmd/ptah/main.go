// Command ptah changes PostgreSQL databases safely. See README.md.
package main

import (
	"os"

	"github.com/ptah-run/ptah/internal/cli"
)

func main() { os.Exit(cli.Main()) }
