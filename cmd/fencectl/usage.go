package main

import (
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"
)

// helpCommandName is `fencectl help [COMMAND]`. The commands have no help
// subcommand and no help flag of their own (see reorderArgs).
const helpCommandName = "help"

func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      helpCommandName,
		Aliases:   []string{"h"},
		Usage:     "list the commands, or show one command's flags and examples",
		UsageText: "help [COMMAND]",
		Action: func(c *cli.Context) error {
			root := c.Lineage()[1]
			switch c.NArg() {
			case 0:
				return cli.ShowAppHelp(root)
			case 1:
				return cli.ShowCommandHelp(root, c.Args().First())
			}
			return usagef("too many arguments %q: usage: fencectl help [COMMAND]", c.Args().Slice())
		},
	}
}

// version is set by a release build (make build passes
// -ldflags "-X main.version=…"); otherwise it comes from the build info.
var version string

// buildVersion is version, or the module version and VCS revision the Go
// toolchain stamped into the binary.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		}
	}
	if rev != "" && v == "devel" {
		v += " " + rev[:min(12, len(rev))] + modified
	}
	return v
}

// flagHelp is one line of OPTIONS in the help: urfave's, without its
// "(default: 0)", "(default: false)", "(default: 0s)" noise for flags whose
// zero value means "not given", and without a second default when the usage
// already names one.
func flagHelp(f cli.Flag) string {
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return urfaveFlagHelp(f)
	}
	var names []string
	for _, n := range df.Names() {
		dash := "--"
		if len(n) == 1 {
			dash = "-"
		}
		names = append(names, dash+n)
	}
	left := strings.Join(names, ", ")
	if df.TakesValue() {
		left += " " + placeholder(f)
	}
	usage := df.GetUsage()
	if def := df.GetDefaultText(); def != "" && !strings.Contains(usage, "(default") {
		switch def {
		case "0", "0s", "false", `""`:
		default:
			usage += " (default: " + def + ")"
		}
	}
	if env := df.GetEnvVars(); len(env) > 0 {
		usage += " [$" + strings.Join(env, ", $") + "]"
	}
	return left + "\t" + usage
}

var urfaveFlagHelp = cli.FlagStringer

// urfave/cli keeps these in package variables: set them once, before any
// app exists (tests build apps from several goroutines).
func init() {
	cli.FlagStringer = flagHelp
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
}

// placeholder names what a flag takes, as the USAGE lines do.
func placeholder(f cli.Flag) string {
	switch plainFlag(f).(type) {
	case *cli.DurationFlag:
		return "D"
	case *cli.GenericFlag:
		if f.Names()[0] == "token" {
			return "T"
		}
		return "N"
	}
	if p, ok := placeholders[f.Names()[0]]; ok {
		return p
	}
	return strings.ToUpper(f.Names()[0])
}

var placeholders = map[string]string{"agent": "A", "after": "ID", "state": "S", "request-id": "K", "reason": "R", "task": "ID", "result": "FILE|-", "since": "T", "format": "text|json|env"}

// durationHint is how every duration error says what is expected.
const durationHint = "use a duration such as 30s, 5m or 1h30m"

// The parser's messages, compiled on the first usage error rather than at
// every process start (they cost each claim about 0.05 ms at init).
var (
	undefinedFlagRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	})
	invalidValueRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): (.*)$`)
	})
	envValueRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^could not parse "(.*)" (?:as \w+ value )?from environment variable "(\w+)" (?:as value )?for flag (\S+): (.*)$`)
	})
)

// onUsageError turns the flag parser's messages into ours: flags with two
// dashes, a suggestion for a mistyped flag, the expected format of a bad
// value, and where to read more.
func onUsageError(c *cli.Context, err error, isSubcommand bool) error {
	helpRef, flags := "fencectl --help", c.App.Flags
	if isSubcommand && c.Command != nil {
		helpRef, flags = "fencectl "+c.Command.Name+" --help", append(append([]cli.Flag{}, c.Command.Flags...), c.App.Flags...)
	}
	msg := err.Error()
	if m := undefinedFlagRE().FindStringSubmatch(msg); m != nil {
		s := "unknown flag --" + m[1]
		near := closest(m[1], flagNames(flags))
		if isSubcommand && c.Command != nil {
			near = suggestFlag(m[1], c.Command, c.App.Flags)
		}
		if near != "" {
			s += fmt.Sprintf("; did you mean --%s?", near)
		}
		return usagef("%s (see %s)", s, helpRef)
	}
	if m := invalidValueRE().FindStringSubmatch(msg); m != nil {
		return usagef("invalid --%s %q: %s (see %s)", m[2], m[1], valueHint(flags, m[2], m[3]), helpRef)
	}
	if m := envValueRE().FindStringSubmatch(msg); m != nil {
		return usagef("invalid %s=%q (for --%s): %s (see %s)", m[2], m[1], m[3], valueHint(flags, m[3], m[4]), helpRef)
	}
	return usagef("%v (see %s)", err, helpRef)
}

// misplacedFlag refuses a command's flag given before the command name
// (`fencectl --token 5 verify x`), where only the global flags go: it is
// no typo, it is in the wrong place, and the message says where it goes.
// rest is the words after it; the command is the first of them that names
// a command with that flag. It returns nil when name is no command's flag.
func misplacedFlag(name string, rest []string) error {
	if name == "" || name == "help" || name == "h" || name == "version" {
		return nil
	}
	var owners []string
	for _, cmd := range commands(&output{}) {
		if slices.Contains(flagNames(cmd.Flags), name) {
			owners = append(owners, cmd.Name)
		}
	}
	if len(owners) == 0 {
		return nil
	}
	for _, w := range rest {
		if w == "--" {
			break
		}
		if slices.Contains(owners, w) {
			return usagef("--%s is a flag of %s, not a global flag: put it after the command name (see fencectl %s --help)", name, w, w)
		}
	}
	list := strings.Join(owners, ", ")
	if len(owners) > 4 {
		list = strings.Join(owners[:4], ", ") + "…"
	}
	return usagef("--%s is not a global flag: it is a flag of %s and goes after the command name (see fencectl --help)", name, list)
}

// suggestFlag is the flag that --name was probably meant to be, or "":
// first a flag of cmd itself, by spelling or by what its USAGE calls the
// flag's value (serve's --addr is `--http ADDR`), and only then a global
// flag one edit away, so that a command's own flag wins over a global one
// that happens to be spelt alike.
func suggestFlag(name string, cmd *cli.Command, global []cli.Flag) string {
	if near := closest(name, flagNames(cmd.Flags)); near != "" {
		return near
	}
	if len(name) >= 3 {
		for _, m := range usageValueRE().FindAllStringSubmatch(cmd.UsageText, -1) {
			if strings.EqualFold(m[2], name) && slices.Contains(flagNames(cmd.Flags), m[1]) {
				return m[1]
			}
		}
	}
	for _, g := range flagNames(global) {
		if editDistance(name, g) <= 1 && len(name) > 1 {
			return g
		}
	}
	return ""
}

// usageValueRE finds "--flag VALUE" in a USAGE line.
var usageValueRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`--([a-z][a-z0-9-]*)[ =]([A-Z][A-Z0-9_-]*)`)
})

// valueHint says what flag name expects, given the parser's complaint.
func valueHint(flags []cli.Flag, name, complaint string) string {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			switch plainFlag(f).(type) {
			case *cli.DurationFlag:
				return durationHint
			case *cli.BoolFlag:
				return "use true or false"
			}
		}
	}
	return strings.TrimPrefix(complaint, "parse error: ")
}

func flagNames(flags []cli.Flag) []string {
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	return append(names, "help")
}

func commandNames(cmds []*cli.Command) []string {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Names()...)
	}
	return names
}

// closest is the candidate nearest to word (at most two edits, counting a
// swap of neighbours as one), or "".
func closest(word string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(word, c); d < bestD && d < len(word) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// decimalValue is a number flag read in base 10 only. urfave/cli reads its
// Int and Uint flags with Go's base prefixes, so --priority 010 was 8 and
// --token 0x10 was 16: a value typed or copied wrongly must be refused, not
// read as another number. String gives the canonical decimal (or "" when
// nothing was given and there is no default), so c.Int, c.Int64 and
// c.Uint64 read it as before.
type decimalValue struct {
	s        string
	unsigned bool
	bits     int
	positive bool   // 0 is refused
	rule     string // what is expected, for the error
}

func (v *decimalValue) Set(s string) error {
	var err error
	var zero bool
	var canonical string
	if v.unsigned {
		var n uint64
		n, err = strconv.ParseUint(s, 10, v.bits)
		canonical, zero = strconv.FormatUint(n, 10), n == 0
	} else {
		var n int64
		n, err = strconv.ParseInt(s, 10, v.bits)
		canonical, zero = strconv.FormatInt(n, 10), n == 0
	}
	var numErr *strconv.NumError
	switch {
	case errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange):
		return fmt.Errorf("out of range; %s", v.rule)
	case err != nil, zero && v.positive,
		// Only the number's own form: no sign "+", no leading zeros
		// ("010" is 8 to C and to Go's base-0 parsing, and 10 here).
		canonical != s:
		return errors.New(v.rule)
	}
	v.s = canonical
	return nil
}

func (v *decimalValue) String() string { return v.s }

const integerRule = "want a whole number in decimal digits"

// tokenValue is --token: positive, decimal, as claim printed it.
func tokenValue() *decimalValue {
	return &decimalValue{unsigned: true, bits: 64, positive: true, rule: "a token is a positive whole number in decimal digits, as claim printed it"}
}

// strictNumbers replaces every Int, Int64, Uint and Uint64 flag with a
// decimal one (see decimalValue), so no command can take a number in
// another base, whoever defines it.
func strictNumbers(flags []cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		out[i] = f
		var v *decimalValue
		var def string
		var base *cli.GenericFlag
		switch f := f.(type) {
		case *cli.IntFlag:
			v, def = &decimalValue{bits: strconv.IntSize, rule: integerRule}, strconv.Itoa(f.Value)
			base = &cli.GenericFlag{Name: f.Name, Aliases: f.Aliases, Usage: f.Usage, EnvVars: f.EnvVars}
		case *cli.Int64Flag:
			v, def = &decimalValue{bits: 64, rule: integerRule}, strconv.FormatInt(f.Value, 10)
			base = &cli.GenericFlag{Name: f.Name, Aliases: f.Aliases, Usage: f.Usage, EnvVars: f.EnvVars}
		case *cli.UintFlag:
			v, def = &decimalValue{unsigned: true, bits: strconv.IntSize, rule: integerRule}, strconv.FormatUint(uint64(f.Value), 10)
			base = &cli.GenericFlag{Name: f.Name, Aliases: f.Aliases, Usage: f.Usage, EnvVars: f.EnvVars}
		case *cli.Uint64Flag:
			v, def = &decimalValue{unsigned: true, bits: 64, rule: integerRule}, strconv.FormatUint(f.Value, 10)
			base = &cli.GenericFlag{Name: f.Name, Aliases: f.Aliases, Usage: f.Usage, EnvVars: f.EnvVars}
		default:
			continue
		}
		if def != "0" {
			v.s = def
		}
		base.Value = v
		out[i] = base
	}
	return out
}
