package main

import (
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// reorderArgs lets flags follow positional arguments. urfave/cli v2 (like
// Go's flag package) stops reading flags at the first positional argument,
// so `fencectl claim t1 --agent a` would treat --agent as an argument. This
// moves every flag of the command ahead of its positional arguments, and a
// global flag given after the command name (`claim --dir x`) to before it.
//
// It is also the one place that decides what a word after the command name
// is, so that a valid task id is always read as an id: only an argument
// that starts with "-" (which no id can) is a flag, -h/--help becomes
// `fencectl help CMD` (the commands themselves have no help subcommand nor
// help flag: urfave would read `verify h` or `verify help` as a help
// request and exit 0), and a `--` ends the flags. Everything after a `--`
// is passed on untouched to run (its CMD); for every other command that
// `--` is dropped, so `show -- h` is `show h`.
func reorderArgs(app *cli.App, args []string) ([]string, error) {
	if len(args) < 2 {
		return args, nil
	}
	globals := flagArity(app.Flags)
	out := []string{args[0]}
	i := 1
	// Global flags before the command.
	for i < len(args) && isFlag(args[i]) {
		if _, ok := globals[flagName(args[i])]; !ok {
			if err := misplacedFlag(flagName(args[i]), args[i+1:]); err != nil {
				return nil, err
			}
		}
		out = append(out, args[i])
		if err := checkGlobalValue(globals, args[i], args[i+1:]); err != nil {
			return nil, err
		}
		if takesValue(globals, args[i]) && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
		i++
	}
	if i >= len(args) {
		return out, nil
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return append(out, args[i:]...), nil
	}
	local := flagArity(cmd.Flags)
	var hoisted, flags, positional []string
	help := false
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			if takesCommandLine[cmd.Name] {
				positional = append(positional, rest[j:]...)
			} else {
				positional = append(positional, rest[j+1:]...)
			}
			break
		}
		if !isFlag(a) {
			positional = append(positional, a)
			continue
		}
		name := flagName(a)
		if name == "help" || name == "h" {
			want, err := boolValue(a)
			if err != nil {
				return nil, err
			}
			help = help || want
			continue
		}
		dst := &flags
		arity := local
		if _, ok := local[name]; !ok {
			if _, ok := globals[name]; ok {
				dst, arity = &hoisted, globals
				if err := checkGlobalValue(globals, a, rest[j+1:]); err != nil {
					return nil, err
				}
			}
		}
		*dst = append(*dst, a)
		if takesValue(arity, a) {
			if j+1 >= len(rest) || rest[j+1] == "--" {
				return nil, usagef("flag %s needs a value (see fencectl %s --help)", a, cmd.Name)
			}
			*dst = append(*dst, rest[j+1])
			j++
		}
	}
	if help {
		return []string{args[0], helpCommandName, cmd.Name}, nil
	}
	out = append(out, hoisted...)
	out = append(out, cmd.Name)
	out = append(out, flags...)
	if len(positional) > 0 {
		// An explicit end of flags: the flag parser consumes this one, so a
		// user's own `--` (run -- CMD) always reaches the command intact.
		out = append(out, "--")
	}
	return append(out, positional...), nil
}

// checkGlobalValue refuses a global --dir given empty (`--dir ""`,
// `--dir=`), as checkEmpty refuses a command's text flag: `--dir "$TREE"`
// with TREE unset must not quietly mean the current directory, whose tree
// would then be changed. (FENCE_DIR="" is unset, as every FENCE_*
// variable given empty is.) next is what follows a on the command line.
func checkGlobalValue(globals map[string]bool, a string, next []string) error {
	if flagName(a) != "dir" {
		return nil
	}
	value, inline := "", strings.Contains(a, "=")
	switch {
	case inline:
		_, value, _ = strings.Cut(a, "=")
	case takesValue(globals, a) && len(next) > 0:
		value = next[0]
	default:
		return nil // no value at all: urfave says so
	}
	if value == "" {
		return usagef("--dir is empty: give the tree's directory, or leave the flag out (then FENCE_DIR, else the current directory)")
	}
	return nil
}

// takesCommandLine names the commands that take a command line after `--`.
var takesCommandLine = map[string]bool{"run": true}

// boolValue reads a boolean flag given as --name or --name=VALUE.
func boolValue(a string) (bool, error) {
	_, v, ok := strings.Cut(a, "=")
	if !ok {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, usagef("invalid %s: use true or false", a)
	}
	return b, nil
}

// wantsJSON reports whether --json was given before `--`, so that even a
// usage error can be reported as JSON. It reads the words as the flag
// parser will: the value of a flag that takes one is not a flag
// (`--reason --json` is a reason), --json=VALUE is a boolean as urfave
// reads it (1, t, TRUE), and the last --json given wins.
func wantsJSON(app *cli.App, args []string) bool {
	arity := flagArity(app.Flags)
	want, command := false, false
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !isFlag(a) {
			if cmd := app.Command(a); cmd != nil && !command {
				command = true
				for name, takes := range flagArity(cmd.Flags) {
					arity[name] = takes
				}
			}
			continue
		}
		if flagName(a) == "json" {
			if v, err := boolValue(a); err == nil {
				want = v
			}
			continue
		}
		if takesValue(arity, a) {
			i++
		}
	}
	return want
}

func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' }

func flagName(a string) string {
	name := strings.TrimLeft(a, "-")
	name, _, _ = strings.Cut(name, "=")
	return name
}

// flagArity maps each flag name to whether it takes a value.
func flagArity(flags []cli.Flag) map[string]bool {
	m := map[string]bool{}
	for _, f := range flags {
		_, isBool := plainFlag(f).(*cli.BoolFlag)
		for _, n := range f.Names() {
			m[n] = !isBool
		}
	}
	m["help"], m["h"] = false, false
	return m
}

// takesValue reports whether flag a (in "--name" form, no "=") consumes the
// next argument.
func takesValue(arity map[string]bool, a string) bool {
	return !strings.Contains(a, "=") && arity[flagName(a)]
}
