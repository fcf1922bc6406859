package main

import "github.com/urfave/cli/v2"

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
		names := f.Names()
		switch f := f.(type) {
		case *cli.BoolFlag:
			out[i] = &namedBool{f, names}
		case *cli.StringFlag:
			out[i] = &namedString{f, names}
		case *cli.DurationFlag:
			out[i] = &namedDuration{f, names}
		case *cli.GenericFlag:
			out[i] = &namedGeneric{f, names}
		case *cli.StringSliceFlag:
			out[i] = &namedStringSlice{f, names}
		}
	}
	return out
}

// plainFlag is the flag f wraps (see nameOnce), or f itself.
func plainFlag(f cli.Flag) cli.Flag {
	if w, ok := f.(interface{ plain() cli.Flag }); ok {
		return w.plain()
	}
	return f
}
