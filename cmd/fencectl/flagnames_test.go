package main

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
)

// Every flag of every command keeps the names urfave/cli itself gives
// it, and stays of the type fencectl's own code looks for.
func TestFlagNames_AsUrfaveNamesThem(t *testing.T) {
	app := newApp(&output{}, nil)
	check := func(where string, flags []cli.Flag) {
		for _, f := range flags {
			plain := plainFlag(f)
			if f == plain && f != cli.HelpFlag && f != cli.VersionFlag {
				t.Errorf("%s: --%s (%T) keeps no names of its own", where, f.Names()[0], f)
			}
			if got, want := f.Names(), plain.Names(); !slices.Equal(got, want) {
				t.Errorf("%s: names %v, urfave/cli says %v", where, got, want)
			}
		}
	}
	check("global", app.Flags)
	for _, c := range app.Commands {
		check(c.Name, c.Flags)
	}
}
