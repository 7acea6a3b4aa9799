package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/runner"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

func (a *app) render(output string, results []planResult) error {
	switch output {
	case outputJSON:
		return renderJSON(a.stdout, results)
	case outputSQL:
		return renderSQL(a.stdout, results)
	default:
		return renderText(a.stdout, results, colorProfile(a.stdout))
	}
}

// colorProfile: ANSI styling only on a terminal, and never when NO_COLOR is
// set (https://no-color.org), so logs and pipes get plain text. The 16 basic
// colors are all the output uses, so there is nothing to detect beyond that.
func colorProfile(w io.Writer) termenv.Profile {
	if os.Getenv("NO_COLOR") != "" {
		return termenv.Ascii
	}
	if isTerminal(w) {
		return termenv.ANSI
	}
	return termenv.Ascii
}

// The JSON shape is a list of items, each naming its resource, so one
// document covers every resource of the file and jq selects among them. The
// plan sits under plan.spec because a later version publishes plans as
// resources of their own; the shape stays.
type (
	jsonOutput struct {
		Items []jsonItem `json:"items"`
	}
	jsonItem struct {
		Resource ref      `json:"resource"`
		Changes  bool     `json:"changes"`
		Plan     jsonPlan `json:"plan"`
		// History is the reading of a PtahMigration's history its plan
		// was selected against; absent for a PtahSchema.
		History *api.HistorySummary `json:"history,omitempty"`
		// Phase, Reason and Message: the resource's status after the
		// pass; absent with --no-publish.
		Phase   api.Phase `json:"phase,omitempty"`
		Reason  string    `json:"reason,omitempty"`
		Message string    `json:"message,omitempty"`
	}
	jsonPlan struct {
		// Metadata names the published plan object; absent when nothing
		// was published (no changes, blocked, or --no-publish).
		Metadata *jsonMeta `json:"metadata,omitempty"`
		// Spec is a jsonPlanSpec (PtahSchema) or a
		// jsonMigrationPlanSpec (PtahMigration).
		Spec any `json:"spec"`
	}
	jsonMeta struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	}
	jsonPlanSpec struct {
		Statements []jsonStatement `json:"statements"`
		// Phases are the transactions the statements run in; absent when
		// there are no statements.
		Phases       []jsonPhase       `json:"phases,omitempty"`
		LockCapacity *api.LockCapacity `json:"lockCapacity,omitempty"`
		Destructive  bool              `json:"destructive"`
		LockTimeout  string            `json:"lockTimeout"`
		// Hints: advice for the reviewer, such as a drop and an add that a
		// rename directive would make a rename; [] when none.
		Hints       []string `json:"hints"`
		Fingerprint string   `json:"fingerprint,omitempty"`
	}
	jsonPhase struct {
		Statements int    `json:"statements"`
		Locks      int    `json:"locks"`
		Reason     string `json:"reason,omitempty"`
		// NoTransaction: its statements run one at a time, outside any
		// transaction block.
		NoTransaction bool `json:"noTransaction,omitempty"`
	}
	jsonStatement struct {
		SQL     string   `json:"sql"`
		Hazards []string `json:"hazards"`
		// Locks: the locks stronger than ROW EXCLUSIVE it takes on
		// relations that exist, the strongest per relation; [] when none.
		Locks []api.PlanLock `json:"locks"`
	}
)

func renderJSON(w io.Writer, results []planResult) error {
	out := jsonOutput{Items: []jsonItem{}} // [] rather than null, always
	for _, r := range results {
		if r.Migration != nil {
			out.Items = append(out.Items, migrationJSONItem(r))
			continue
		}
		spec := jsonPlanSpec{
			Statements:  []jsonStatement{},
			Destructive: r.Plan.Destructive,
			LockTimeout: r.Plan.LockTimeout.String(),
			Hints:       append([]string{}, r.Plan.Hints...),
		}
		for _, s := range r.Plan.Statements {
			st := jsonStatement{SQL: s.SQL, Hazards: []string{}, Locks: []api.PlanLock{}}
			for _, h := range s.Hazards {
				st.Hazards = append(st.Hazards, string(h))
			}
			st.Locks = append(st.Locks, runner.APILocks(s.Locks)...)
			spec.Statements = append(spec.Statements, st)
		}
		for _, ph := range r.Plan.Transactions() {
			spec.Phases = append(spec.Phases, jsonPhase{Statements: ph.Statements, Locks: ph.Locks, Reason: ph.Reason, NoTransaction: ph.NoTransaction})
		}
		if c := r.Plan.LockCapacity; r.changes() && c != (postgres.LockCapacity{}) {
			capacity := api.LockCapacity(c)
			spec.LockCapacity = &capacity
		}
		item := jsonItem{Resource: refOf(r.Resource), Changes: r.changes(), Plan: jsonPlan{Spec: spec}}
		if p := r.Published; p != nil {
			item.Plan.Metadata = &jsonMeta{Name: p.Name, UID: p.UID}
			spec.Fingerprint = p.Fingerprint
			item.Plan.Spec = spec
		}
		if st := r.Status; st != nil {
			item.Phase, item.Reason, item.Message = st.Phase, st.Reason, st.Message
		}
		out.Items = append(out.Items, item)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // SQL compares with < and >; keep it readable
	return enc.Encode(out)
}

// renderSQL concatenates the plans' scripts. Each is headed by a comment
// naming its resource; psql runs the whole as-is.
func renderSQL(w io.Writer, results []planResult) error {
	var b strings.Builder
	for i, r := range results {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "-- %s (%s)\n", r.Resource.Ref(), r.Resource.File)
		if p := r.Published; p != nil {
			fmt.Fprintf(&b, "-- plan %s, uid %s, fingerprint %s\n", p.Name, p.UID, p.Fingerprint)
		}
		if r.Migration != nil {
			writeMigrationSQL(&b, r)
			continue
		}
		b.WriteString(r.Plan.Script())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// styles for the text output. Only the 16 basic ANSI colors are used, so the
// output reads the same on dark and light terminals without querying them.
type styles struct {
	header, dim, number, ok, danger lipgloss.Style
	hazard                          map[postgres.Hazard]lipgloss.Style
	otherHazard                     lipgloss.Style
}

func newStyles(w io.Writer, profile termenv.Profile) styles {
	r := lipgloss.NewRenderer(w)
	r.SetColorProfile(profile)
	red, yellow, magenta, green := lipgloss.Color("1"), lipgloss.Color("3"), lipgloss.Color("5"), lipgloss.Color("2")
	return styles{
		header: r.NewStyle().Bold(true),
		dim:    r.NewStyle().Faint(true),
		number: r.NewStyle().Faint(true),
		ok:     r.NewStyle().Bold(true).Foreground(green),
		danger: r.NewStyle().Bold(true).Foreground(red),
		hazard: map[postgres.Hazard]lipgloss.Style{
			postgres.HazardDeletesData:   r.NewStyle().Bold(true).Foreground(red),
			postgres.HazardRewritesTable: r.NewStyle().Bold(true).Foreground(yellow),
			postgres.HazardBlocksReads:   r.NewStyle().Bold(true).Foreground(red),
			postgres.HazardBlocksWrites:  r.NewStyle().Bold(true).Foreground(yellow),
			postgres.HazardBuildsIndex:   r.NewStyle().Foreground(magenta),
			postgres.HazardMayFail:       r.NewStyle().Foreground(yellow),
		},
		otherHazard: r.NewStyle().Foreground(yellow),
	}
}

// lockList is a statement's locks as the text output shows them:
// "ACCESS EXCLUSIVE on public.accounts, SHARE on public.orders".
func lockList(locks []postgres.Lock) string {
	s := make([]string, len(locks))
	for i, l := range locks {
		s[i] = l.String()
	}
	return strings.Join(s, ", ")
}

func (st styles) tag(h postgres.Hazard) string {
	s, ok := st.hazard[h]
	if !ok {
		s = st.otherHazard
	}
	return s.Render("[" + string(h) + "]")
}

// privilegesNote is printed under every text plan: a reader must not take
// "No changes" to mean grants and owners match too. ownershipNote replaces
// it when every resource shown manages its privileges (spec.privileges:
// Managed), whose grants are compared and planned; owners never are.
const (
	privilegesNote = "Note: privileges and ownership are not managed: grants and owners are neither compared nor planned."
	ownershipNote  = "Note: ownership is not managed: owners are neither compared nor planned (grants are: spec.privileges is Managed)."
	mixedNote      = "Note: ownership is not managed, and privileges only where spec.privileges is Managed: elsewhere grants and owners are neither compared nor planned."
)

func renderText(w io.Writer, results []planResult, profile termenv.Profile) error {
	st := newStyles(w, profile)
	var b strings.Builder
	schemas, managed, ignored := false, 0, 0
	for i, r := range results {
		if i > 0 {
			b.WriteString("\n")
		}
		if r.Migration != nil {
			writeTextMigrationPlan(&b, st, r)
			continue
		}
		schemas = true
		if r.Resource.Schema.Spec.ManagesPrivileges() {
			managed++
		} else {
			ignored++
		}
		writeTextPlan(&b, st, r)
	}
	if schemas {
		note := privilegesNote
		switch {
		case ignored == 0:
			note = ownershipNote
		case managed > 0:
			note = mixedNote
		}
		b.WriteString("\n" + st.dim.Render(note) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeTextPlan(b *strings.Builder, st styles, r planResult) {
	spec := r.Resource.Schema.Spec
	fmt.Fprintf(b, "%s %s\n", st.header.Render(r.Resource.Ref()),
		st.dim.Render(fmt.Sprintf("(%s:%d; schemas: %s; lock timeout %s)",
			r.Resource.File, r.Resource.Line, strings.Join(spec.Schemas, ", "), r.Plan.LockTimeout)))
	if r.blocked() && r.Published == nil {
		writeBlocked(b, st, r.Status.Reason, r.Status.Message)
		return
	}
	if !r.changes() {
		b.WriteString("\n" + st.ok.Render("No changes.") + " The database matches the declared schema.\n")
		return
	}
	if p := r.Published; p != nil {
		b.WriteString(st.dim.Render(fmt.Sprintf("plan %s  uid %s", p.Name, p.UID)) + "\n")
	}
	n := len(r.Plan.Statements)
	width := len(strconv.Itoa(n))
	indent := strings.Repeat(" ", 2+width+2)
	withHazards := 0
	phases := r.Plan.Transactions()
	// A plan with statements run without a transaction counts phases.
	unit := "Transaction"
	for _, ph := range phases {
		if ph.NoTransaction {
			unit = "Phase"
		}
	}
	starts := map[int]int{} // the statement a phase starts at: the phase
	for k, next := 0, 0; k < len(phases) && (len(phases) > 1 || unit == "Phase"); k++ {
		starts[next] = k
		next += phases[k].Statements
	}
	for i, s := range r.Plan.Statements {
		if k, ok := starts[i]; ok {
			ph := phases[k]
			what := fmt.Sprintf("%s %d/%d: %s", unit, k+1, len(phases), statementRange(i, ph.Statements))
			if ph.NoTransaction {
				what += ", without a transaction"
			}
			if ph.Reason != "" {
				what += " (" + ph.Reason + ")"
			}
			b.WriteString("\n" + st.header.Render(what) + "\n")
		}
		b.WriteString("\n")
		lines := strings.Split(s.SQL+";", "\n")
		fmt.Fprintf(b, "  %s  %s\n", st.number.Render(fmt.Sprintf("%*d", width, i+1)), lines[0])
		for _, l := range lines[1:] {
			b.WriteString(strings.TrimRight(indent+l, " ") + "\n")
		}
		if len(s.Hazards) > 0 {
			withHazards++
			tags := make([]string, len(s.Hazards))
			for j, h := range s.Hazards {
				tags[j] = st.tag(h)
			}
			b.WriteString(indent + strings.Join(tags, " ") + "\n")
		}
		if len(s.Locks) > 0 {
			b.WriteString(indent + st.dim.Render("locks "+lockList(s.Locks)) + "\n")
		}
	}
	b.WriteString("\n")
	if r.Plan.Destructive {
		b.WriteString(st.danger.Render("Destructive:") + " this plan deletes data")
		if spec.Policy.AllowDestructive {
			b.WriteString(" (spec.policy.allowDestructive is true).\n")
		} else {
			b.WriteString("; spec.policy.allowDestructive is false, so it would be refused at apply.\n")
		}
	}
	for _, h := range r.Plan.Hints {
		b.WriteString(st.header.Render("Hint:") + " " + h + ".\n")
	}
	if note := r.Plan.TransactionsNote(); len(note) > 0 {
		fmt.Fprintf(b, "%s %s\n", st.header.Render(fmt.Sprintf("%ss: %d.", unit, len(phases))), strings.Join(note, " "))
	}
	summary := fmt.Sprintf("Plan: %s, %d with hazards", plural(n, "statement"), withHazards)
	if len(phases) > 1 {
		summary = fmt.Sprintf("Plan: %s in %d %ss, %d with hazards", plural(n, "statement"), len(phases), strings.ToLower(unit), withHazards)
	}
	if r.Plan.Destructive {
		summary += ", destructive"
	}
	b.WriteString(st.header.Render(summary+".") + "\n")
	if r.Status != nil {
		writePhase(b, st, r.Status.RunState, r.Published)
	}
}

// writeBlocked says why a resource is blocked; a message of several lines
// (a migration's history verdicts) is indented under the first.
func writeBlocked(b *strings.Builder, st styles, reason, message string) {
	lines := strings.Split(strings.TrimRight(message, "\n"), "\n")
	b.WriteString("\n" + st.danger.Render("Blocked") + " (" + reason + "): " + lines[0] + "\n")
	for _, l := range lines[1:] {
		b.WriteString("  " + l + "\n")
	}
}

// writePhase says where the resource stands after publishing, and what the
// person does next.
func writePhase(b *strings.Builder, st styles, s api.RunState, p *publishedPlan) {
	switch s.Phase {
	case api.PhaseAwaitingApproval:
		b.WriteString("\n" + st.header.Render("Awaiting approval.") + " To approve exactly this plan:\n")
		if p != nil {
			fmt.Fprintf(b, "  ptah approve %s --fingerprint %s\n", p.UID, p.Fingerprint)
		}
	case api.PhaseApproved:
		b.WriteString("\n" + st.ok.Render("Approved.") + " ptah apply runs it.\n")
	case api.PhaseBlocked:
		writeBlocked(b, st, s.Reason, s.Message)
	default:
		fmt.Fprintf(b, "\n%s: %s\n", st.header.Render(string(s.Phase)), s.Message)
	}
}

// statementRange names the n statements from index i, 1-based.
func statementRange(i, n int) string {
	if n == 1 {
		return fmt.Sprintf("statement %d", i+1)
	}
	return fmt.Sprintf("statements %d-%d", i+1, i+n)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
