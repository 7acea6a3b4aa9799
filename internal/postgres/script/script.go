// Package script splits SQL scripts into statements as psql does, so that
// each statement can be sent to PostgreSQL on its own and anything said
// about it (an error, a position) can be placed in the file.
//
// It knows the lexical structure of PostgreSQL's SQL, not its grammar: white
// space; -- and nested /* */ comments; single-quoted strings, with their E,
// B, X, N and U& forms (a backslash escapes in E'...' strings, and in plain
// ones while standard_conforming_strings is off); double-quoted
// identifiers; dollar-quoted bodies with or without tags; parentheses; and
// the SQL-standard bodies of CREATE FUNCTION and CREATE PROCEDURE
// (BEGIN ATOMIC ... END). A semicolon outside all of these ends a
// statement, as in psql.
//
// A psql meta-command (a backslash outside quotes, as in \connect or \i)
// is not SQL, and is an error naming its line.
package script

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Statement is one statement of a script.
//
// Its bytes are src[From:To]: the white space, comments and empty
// statements (lone semicolons) before it, the statement itself,
// src[Start:End], and what follows it up to and including the semicolon
// that ends it (white space, comments, the semicolon; nothing at all when
// the script ends without one). The statements of a script follow each
// other without gaps from offset 0: src[last.To:] is the script's tail,
// white space, comments and empty statements only.
type Statement struct {
	// SQL is src[Start:End]: the statement from its first token to the
	// end of its last, as it is to be sent to the server.
	SQL        string
	From, To   int
	Start, End int
	// Line and Column (both 1-based; the column counted in characters,
	// not bytes) are where SQL starts in the script.
	Line, Column int
	// Head is the statement's leading words, lower-cased: its unquoted
	// keywords and identifiers up to the first other token, at most
	// four (["create", "unique", "index", "concurrently"], ["vacuum"]).
	Head []string
}

// Error is a script that cannot be split: a quote or comment left open at
// the end, or a psql meta-command.
type Error struct {
	Offset       int // byte offset in the script
	Line, Column int // 1-based; the column counted in characters
	Msg          string
}

func (e *Error) Error() string { return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg) }

// Options are the settings that change how PostgreSQL reads a script. The
// zero value is PostgreSQL's default.
type Options struct {
	// NonStandardStrings: standard_conforming_strings is off where the
	// script starts, so backslashes in plain '...' strings are escapes.
	// Either way, the SET and RESET statements of the setting in the
	// script itself are followed, as the server follows them.
	NonStandardStrings bool
	// OnToken, when set, hears every token and comment of the script, in
	// order, as Split reads it (the semicolons that end statements
	// excepted): what a caller needs to read more of a statement than its
	// head without lexing it again.
	OnToken func(Token)
}

// TokenKind is what a Token is.
type TokenKind int

const (
	// Word is an unquoted keyword or identifier.
	Word TokenKind = iota
	// String is a quoted or dollar-quoted string.
	String
	// Comment is a -- or /* */ comment.
	Comment
	// Other is anything else: a quoted identifier, a number, an operator,
	// a parenthesis, a comma.
	Other
)

// Token is one token or comment of a script: its bytes are src[Start:End].
type Token struct {
	Kind       TokenKind
	Start, End int
}

// Split splits src, read with PostgreSQL's default settings.
func Split(src string) ([]Statement, error) { return Options{}.Split(src) }

// Split splits src into its statements, in order. Empty statements (a
// semicolon with nothing but white space or comments before it) are not
// statements: their bytes belong to the next statement's span, or to the
// tail.
func (o Options) Split(src string) ([]Statement, error) {
	s := &scanner{src: src, strings: stringsState{session: !o.NonStandardStrings}, onToken: o.OnToken}
	s.strings.current = s.strings.session
	lines := lineCounter{src: src, line: 1}
	var out []Statement
	from := 0
	for {
		st, ok, err := s.next()
		if err != nil {
			e := err.(*Error)
			e.Line, e.Column = lines.at(e.Offset)
			return nil, e
		}
		if !ok {
			return out, nil
		}
		st.From = from
		st.SQL = src[st.Start:st.End]
		st.Line, st.Column = lines.at(st.Start)
		from = st.To
		out = append(out, st)
	}
}

// Position returns the 1-based line and column (in characters) of the byte
// offset in src.
func Position(src string, offset int) (line, col int) {
	c := lineCounter{src: src, line: 1}
	return c.at(offset)
}

// lineCounter turns byte offsets, asked for in increasing order, into
// lines and columns in one pass over the text.
type lineCounter struct {
	src             string
	off, line, from int // from: where the current line starts
}

func (c *lineCounter) at(offset int) (line, col int) {
	offset = min(max(offset, 0), len(c.src))
	if offset < c.off {
		c.off, c.line, c.from = 0, 1, 0
	}
	for ; c.off < offset; c.off++ {
		if c.src[c.off] == '\n' {
			c.line, c.from = c.line+1, c.off+1
		}
	}
	return c.line, utf8.RuneCountInString(c.src[c.from:offset]) + 1
}

// stringsState follows standard_conforming_strings through the script's
// SET and RESET statements and transactions, as the server does (but for
// savepoints).
type stringsState struct {
	session, current bool // the session's value, and the value in force
	inTx             bool
	atBegin          bool // the session's value when the transaction began
}

// scanner is the state of one pass over a script.
type scanner struct {
	src     string
	pos     int
	strings stringsState
	onToken func(Token)
	begin   int // where the token being scanned starts

	// Per statement.
	started     bool
	parens      int
	atomic      int    // depth of BEGIN ATOMIC ... END blocks (CASE ... END inside them)
	beginSeen   bool   // the previous token was BEGIN, at depth 0 of a routine's definition
	idents      []byte // first letters of the first four unquoted identifiers (psql's heuristic)
	head        []string
	headDone    bool
	tokens      []token // the first few tokens, to follow SET standard_conforming_strings
	start, last int     // where the statement starts, and where its last token ends
}

type tokenKind int

const (
	tokWord tokenKind = iota
	tokString
	tokOther
)

type token struct {
	kind tokenKind
	text string // a word lower-cased; a string's raw content
}

const maxTokens = 6

func (s *scanner) reset() {
	s.started, s.parens, s.atomic, s.beginSeen = false, 0, 0, false
	s.idents, s.head, s.headDone, s.tokens = s.idents[:0], nil, false, s.tokens[:0]
}

// next scans the next statement; ok is false at the end of the script.
func (s *scanner) next() (st Statement, ok bool, err error) {
	s.reset()
	src := s.src
	for s.pos < len(src) {
		c := src[s.pos]
		switch {
		case isSpace(c):
			s.pos++
		case c == '-' && s.peek(1) == '-':
			begin := s.pos
			for s.pos < len(src) && src[s.pos] != '\n' && src[s.pos] != '\r' {
				s.pos++
			}
			s.comment(begin)
		case c == '/' && s.peek(1) == '*':
			begin := s.pos
			if err := s.blockComment(); err != nil {
				return st, false, err
			}
			s.comment(begin)
		case c == ';' && s.parens == 0 && s.atomic == 0:
			s.pos++
			if !s.started {
				continue // an empty statement
			}
			return s.finish(s.pos), true, nil
		default:
			if err := s.token(); err != nil {
				return st, false, err
			}
		}
	}
	if !s.started {
		return st, false, nil
	}
	// The last statement has no semicolon; its trailing white space and
	// comments are the script's tail.
	return s.finish(s.last), true, nil
}

func (s *scanner) finish(to int) Statement {
	s.follow()
	head := s.head
	if len(head) == 0 {
		head = nil
	}
	return Statement{Start: s.start, End: s.last, To: to, Head: append([]string(nil), head...)}
}

func (s *scanner) peek(n int) byte {
	if s.pos+n < len(s.src) {
		return s.src[s.pos+n]
	}
	return 0
}

// token scans one token that is not white space, a comment or a
// statement-ending semicolon.
func (s *scanner) token() error {
	src, begin := s.src, s.pos
	s.begin = begin
	if !s.started {
		s.started, s.start = true, begin
	}
	c := src[s.pos]
	var err error
	switch {
	case c == '\'':
		err = s.quoted(begin, !s.strings.current)
	case (c == 'e' || c == 'E') && s.peek(1) == '\'':
		s.pos++
		err = s.quoted(begin, true)
	case (c == 'b' || c == 'B' || c == 'x' || c == 'X' || c == 'n' || c == 'N') && s.peek(1) == '\'':
		s.pos++
		err = s.quoted(begin, false)
	case (c == 'u' || c == 'U') && s.peek(1) == '&' && (s.peek(2) == '\'' || s.peek(2) == '"'):
		s.pos += 2
		if src[s.pos] == '"' {
			err = s.identifier(begin)
		} else {
			err = s.quoted(begin, false)
		}
	case c == '"':
		err = s.identifier(begin)
	case c == '$':
		err = s.dollar()
	case isIdentStart(c):
		for s.pos < len(src) && isIdentCont(src[s.pos]) {
			s.pos++
		}
		s.word(strings.ToLower(src[begin:s.pos]))
	case c >= '0' && c <= '9':
		for s.pos < len(src) && (isIdentCont(src[s.pos]) || src[s.pos] == '.') {
			s.pos++
		}
		s.other(src[begin:s.pos])
	case c == '\\':
		return s.metaCommand()
	default:
		s.pos++
		switch c {
		case '(':
			s.parens++
		case ')':
			if s.parens > 0 {
				s.parens--
			}
		}
		s.other(src[begin:s.pos])
	}
	s.last = s.pos
	return err
}

func (s *scanner) blockComment() error {
	begin, depth := s.pos, 0
	for s.pos < len(s.src) {
		switch {
		case s.src[s.pos] == '/' && s.peek(1) == '*':
			depth++
			s.pos += 2
		case s.src[s.pos] == '*' && s.peek(1) == '/':
			depth--
			s.pos += 2
			if depth == 0 {
				return nil
			}
		default:
			s.pos++
		}
	}
	return &Error{Offset: begin, Msg: "unterminated /* comment"}
}

// quoted scans a single-quoted string whose opening quote is at s.pos
// (begin is where its prefix, if any, starts). escapes: a backslash
// escapes the next character. A string followed by white space holding a
// newline and another quoted part continues in that part, in the same
// mode, as PostgreSQL reads it.
func (s *scanner) quoted(begin int, escapes bool) error {
	src := s.src
	content := s.pos + 1
	for {
		s.pos++ // past the opening quote
		for {
			if s.pos >= len(src) {
				return &Error{Offset: begin, Msg: "unterminated quoted string"}
			}
			c := src[s.pos]
			if escapes && c == '\\' {
				s.pos += 2
				continue
			}
			s.pos++
			if c != '\'' {
				continue
			}
			if s.pos < len(src) && src[s.pos] == '\'' {
				s.pos++ // a doubled quote
				continue
			}
			break
		}
		next, ok := continuation(src, s.pos)
		if !ok {
			break
		}
		s.pos = next
	}
	s.add(token{kind: tokString, text: src[content : s.pos-1]})
	return nil
}

// continuation reports whether a quoted string that ended at i goes on:
// white space including a newline (and maybe -- comments, which end at
// one) and then a quote. It returns the position of that quote.
func continuation(src string, i int) (int, bool) {
	newline := false
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n' || c == '\r':
			newline = true
			i++
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			for i < len(src) && src[i] != '\n' && src[i] != '\r' {
				i++
			}
		case c == '\'' && newline:
			return i, true
		default:
			return 0, false
		}
	}
	return 0, false
}

func (s *scanner) identifier(begin int) error {
	src := s.src
	for s.pos++; ; {
		if s.pos >= len(src) {
			return &Error{Offset: begin, Msg: "unterminated quoted identifier"}
		}
		c := src[s.pos]
		s.pos++
		if c != '"' {
			continue
		}
		if s.pos < len(src) && src[s.pos] == '"' {
			s.pos++
			continue
		}
		s.other(src[begin:s.pos])
		return nil
	}
}

// dollar scans what starts with '$': a dollar-quoted body ($$...$$,
// $tag$...$tag$), a parameter ($1) or a lone dollar sign.
func (s *scanner) dollar() error {
	src, begin := s.src, s.pos
	i := s.pos + 1
	if i < len(src) && isDigit(src[i]) {
		for i < len(src) && isDigit(src[i]) {
			i++
		}
		s.pos = i
		s.other(src[begin:i])
		return nil
	}
	if i < len(src) && isIdentStart(src[i]) {
		for i < len(src) && (isIdentStart(src[i]) || isDigit(src[i])) {
			i++
		}
	}
	if i >= len(src) || src[i] != '$' {
		s.pos++
		s.other("$")
		return nil
	}
	delim := src[begin : i+1]
	end := strings.Index(src[i+1:], delim)
	if end < 0 {
		return &Error{Offset: begin, Msg: "unterminated dollar-quoted string " + delim}
	}
	s.pos = i + 1 + end + len(delim)
	s.add(token{kind: tokString, text: src[i+1 : i+1+end]})
	return nil
}

// metaCommand refuses a backslash outside quotes: in a psql script it
// starts a meta-command, which only psql understands.
func (s *scanner) metaCommand() error {
	i := s.pos + 1
	for i < len(s.src) && !isSpace(s.src[i]) && s.src[i] != '\\' && s.src[i] != ';' {
		i++
	}
	name := s.src[s.pos:i]
	if name == "\\" || name == "\\." {
		return &Error{Offset: s.pos, Msg: "psql meta-command " + name + " (or COPY data): not SQL; ptah runs each statement itself, without psql"}
	}
	return &Error{Offset: s.pos, Msg: "psql meta-command " + name + ": not SQL; ptah runs each statement itself, without psql"}
}

// word handles an unquoted keyword or identifier.
func (s *scanner) word(w string) {
	if !s.headDone && len(s.head) < 4 {
		s.head = append(s.head, w)
	}
	// psql's heuristic for SQL-standard routine bodies: the statement's
	// first identifiers spell CREATE [OR REPLACE] FUNCTION|PROCEDURE.
	if len(s.idents) < 4 {
		s.idents = append(s.idents, w[0])
	}
	routine := s.definesRoutine() && s.parens == 0
	atomic := s.beginSeen && w == "atomic"
	s.add(token{kind: tokWord, text: w})
	if !routine {
		return
	}
	switch {
	case atomic:
		s.atomic++
	case w == "begin" && s.atomic == 0:
		// Only BEGIN ATOMIC opens a body: a routine may be named begin.
		s.beginSeen = true
	case w == "begin" || (w == "case" && s.atomic > 0):
		s.atomic++
	case w == "end" && s.atomic > 0:
		s.atomic--
	}
}

func (s *scanner) definesRoutine() bool {
	id := s.idents
	fp := func(i int) bool { return len(id) > i && (id[i] == 'f' || id[i] == 'p') }
	return len(id) > 1 && id[0] == 'c' && (fp(1) || (len(id) > 3 && id[1] == 'o' && id[2] == 'r' && fp(3)))
}

// other handles any other token: it ends the statement's head.
func (s *scanner) other(text string) { s.add(token{kind: tokOther, text: text}) }

// comment reports the comment src[begin:s.pos] to OnToken.
func (s *scanner) comment(begin int) {
	if s.onToken != nil {
		s.onToken(Token{Kind: Comment, Start: begin, End: s.pos})
	}
}

func (s *scanner) add(t token) {
	if s.onToken != nil {
		kind := Other
		switch t.kind {
		case tokWord:
			kind = Word
		case tokString:
			kind = String
		}
		s.onToken(Token{Kind: kind, Start: s.begin, End: s.pos})
	}
	if t.kind != tokWord {
		s.headDone = true
	}
	s.beginSeen = s.beginSeen && t.kind == tokWord && t.text == "begin"
	if len(s.tokens) < maxTokens {
		s.tokens = append(s.tokens, t)
	}
}

// follow updates standard_conforming_strings after a statement that sets
// it, resets it, or begins or ends a transaction.
func (s *scanner) follow() {
	t := s.tokens
	word := func(i int) string {
		if i < len(t) && t[i].kind == tokWord {
			return t[i].text
		}
		return ""
	}
	st := &s.strings
	switch word(0) {
	case "begin", "start":
		if !st.inTx {
			st.inTx, st.atBegin = true, st.session
		}
	case "commit", "end":
		if word(1) != "prepared" {
			st.inTx, st.current = false, st.session
		}
	case "rollback", "abort":
		w := word(1)
		if w == "prepared" || w == "to" || (w == "work" || w == "transaction") && word(2) == "to" {
			return // another transaction's, or back to a savepoint
		}
		if st.inTx {
			st.session = st.atBegin
		}
		st.inTx, st.current = false, st.session
	case "reset":
		if w := word(1); w == "all" || w == "standard_conforming_strings" {
			st.session, st.current = true, true
		}
	case "set":
		i, local := 1, false
		switch word(1) {
		case "session":
			i = 2
		case "local":
			i, local = 2, true
		}
		if word(i) != "standard_conforming_strings" || i+2 >= len(t) {
			return
		}
		if op := t[i+1]; !(op.kind == tokWord && op.text == "to" || op.kind == tokOther && op.text == "=") {
			return
		}
		on, ok := boolSetting(t[i+2])
		switch {
		case !ok:
		case local && st.inTx:
			st.current = on
		case !local:
			st.session, st.current = on, on
		}
	}
}

// boolSetting reads the value of SET standard_conforming_strings.
func boolSetting(t token) (on, ok bool) {
	switch strings.ToLower(t.text) {
	case "on", "true", "yes", "1", "default":
		return true, true
	case "off", "false", "no", "0":
		return false, true
	}
	return false, false
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdentStart: a letter, an underscore, or any byte of a multi-byte
// character, as PostgreSQL's lexer has it.
func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }
