package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// Flag names, worked out once.
//
// urfave/cli works a flag's names out of its Name and Aliases every time
// it asks for them, through a regular expression per name (cli.FlagNames),
// and it asks all the time: to run flag actions it asks, for every flag of
// the command, whether it is set, and each answer goes through the
// command's flags one by one, asking each for its names. That was a tenth
// of the CPU the daemon spends on a claim (perf, 8 agents claiming at
// once). So every flag of the app is wrapped, once it is built, in one
// that keeps its names.
//
// The wrappers embed the flag itself: every method urfave/cli asks for is
// the flag's own, but Names. fencectl's own code that looks at a flag's
// type asks plainFlag for it.

type namedBool struct {
	*cli.BoolFlag
	names []string
}

type namedString struct {
	*cli.StringFlag
	names []string
}

type namedDuration struct {
	*cli.DurationFlag
	names []string
}

type namedGeneric struct {
	*cli.GenericFlag
	names []string
}

type namedStringSlice struct {
	*cli.StringSliceFlag
	names []string
}

func (f *namedBool) Names() []string        { return f.names }
func (f *namedString) Names() []string      { return f.names }
func (f *namedDuration) Names() []string    { return f.names }
func (f *namedGeneric) Names() []string     { return f.names }
func (f *namedStringSlice) Names() []string { return f.names }

func (f *namedBool) plain() cli.Flag        { return f.BoolFlag }
func (f *namedString) plain() cli.Flag      { return f.StringFlag }
func (f *namedDuration) plain() cli.Flag    { return f.DurationFlag }
func (f *namedGeneric) plain() cli.Flag     { return f.GenericFlag }
func (f *namedStringSlice) plain() cli.Flag { return f.StringSliceFlag }

// nameOnce returns flags, each of a type listed above wrapped so that its
// names are worked out now, once. The help and version flags stay as they
// are: urfave/cli knows them by identity.
func nameOnce(flags []cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		out[i] = f
		if f == cli.HelpFlag || f == cli.VersionFlag {
			continue
		}
		switch f := f.(type) {
		case *cli.BoolFlag:
			out[i] = &namedBool{f, flagNamesOf(f, f.Name, f.Aliases)}
		case *cli.StringFlag:
			out[i] = &namedString{f, flagNamesOf(f, f.Name, f.Aliases)}
		case *cli.DurationFlag:
			out[i] = &namedDuration{f, flagNamesOf(f, f.Name, f.Aliases)}
		case *cli.GenericFlag:
			out[i] = &namedGeneric{f, flagNamesOf(f, f.Name, f.Aliases)}
		case *cli.StringSliceFlag:
			out[i] = &namedStringSlice{f, flagNamesOf(f, f.Name, f.Aliases)}
		}
	}
	return out
}

// flagNamesOf is f.Names() for a flag named name with aliases: urfave/cli
// cuts each at its first comma or space (the form of its first version),
// which none of fencectl's names has; a name that does is left to it. The
// app is built for every command the daemon runs, so this too is done
// once a command.
func flagNamesOf(f cli.Flag, name string, aliases []string) []string {
	all := append([]string{name}, aliases...)
	for _, n := range all {
		if strings.ContainsAny(n, ", ") {
			return f.Names()
		}
	}
	return all
}

// plainFlag is the flag f wraps (see nameOnce), or f itself.
func plainFlag(f cli.Flag) cli.Flag {
	if w, ok := f.(interface{ plain() cli.Flag }); ok {
		return w.plain()
	}
	return f
}
