package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

// agentsGuide is the agents' guide (docs/agents.md is it, rendered with
// genericGuide): the text a person pastes into an agent's instructions.
//
//go:embed agents_guide.md
var agentsGuide string

// guideValues fill in the guide for one tree.
type guideValues struct {
	Dir         string
	Backend     string
	TTL         string
	Heartbeat   string // how often to heartbeat: a third of the TTL
	MaxAttempts string
}

// genericGuide is what the guide says when no tree is named
// (`guide --generic`, docs/agents.md).
var genericGuide = guideValues{Dir: "TREE", Backend: "bbolt or etcd", TTL: "TTL", Heartbeat: "TTL/3", MaxAttempts: "N"}

var guideTemplate = sync.OnceValue(func() *template.Template { return template.Must(template.New("guide").Parse(agentsGuide)) })

func renderGuide(v guideValues) string {
	var b strings.Builder
	if err := guideTemplate().Execute(&b, v); err != nil {
		panic(err) // the template is ours and its values are strings
	}
	return b.String()
}

// guideJSON is guide's answer with --json: the guide as one string.
type guideJSON struct {
	notices
	Text string `json:"text"` // Markdown
}

func printGuide(out *output, v guideValues) {
	text := renderGuide(v)
	out.print(&guideJSON{Text: text}, func(w io.Writer) { fmt.Fprint(w, text) })
}

func guideCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "guide",
		Usage:     "print the agents' guide, filled in for this tree",
		UsageText: "guide [--generic]",
		Description: `Prints the text to paste into an AI agent's instructions (CLAUDE.md, AGENTS.md,
a system prompt): the protocol in ten lines, how to note the task and token
before anything else, how to take a claim back after a restart, what every exit
code means and the one right reaction to it, and how to let fencectl run or
the MCP server heartbeat. It names this tree's path, backend and defaults;
--generic prints it with placeholders instead and needs no tree.

   fencectl --dir /srv/tasks guide >> AGENTS.md
   fencectl guide --generic`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "generic", Usage: "placeholders instead of this tree's path and defaults (no tree needed)"}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("guide takes no arguments (got %q)", c.Args().Slice())
			}
			if c.Bool("generic") {
				printGuide(out, genericGuide)
				return nil
			}
			err := withTree(c, out, func(t *fence.Tree) error {
				st, err := t.Status(c.Context)
				if err != nil {
					return err
				}
				printGuide(out, guideValues{
					Dir: quoteIfNeeded(t.Root()), Backend: st.Journal.Backend,
					TTL: st.Defaults.TTL.String(), Heartbeat: heartbeatEvery(st.Defaults.TTL), MaxAttempts: fmt.Sprint(st.Defaults.MaxAttempts),
				})
				return nil
			})
			if errors.Is(err, fence.ErrNoJournal) {
				return fmt.Errorf("%w (or `fencectl guide --generic` prints the guide with placeholders, no tree needed)", err)
			}
			return err
		},
	}
}

// heartbeatEvery is how often the guide tells an agent to heartbeat a
// lease of ttl: a third of it, as run does, rounded to what a person reads
// (10m: 3m20s).
func heartbeatEvery(ttl time.Duration) string {
	every := ttl / 3
	if every >= 10*time.Second {
		return every.Round(time.Second).String()
	}
	return every.Round(time.Millisecond).String()
}

// quoteIfNeeded quotes s for a POSIX shell only if it needs it, so that
// a plain path reads plainly in the guide.
func quoteIfNeeded(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,@", r))
	}) < 0
	if plain {
		return s
	}
	return shellQuote(s)
}
