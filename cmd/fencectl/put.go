package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func putCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "put",
		Usage:     "write an output of a task you hold into out/ID/NAME (fenced)",
		UsageText: "put ID NAME [FILE|-] --token T",
		Description: `Writes FILE (or stdin with "-" or no FILE) to out/ID/NAME atomically, only while
T is the task's current token; a stale token exits 3 and writes nothing. An
agent that lost its lease cannot overwrite the work of the one that took over.
NAME follows the id rule. A later put of the same NAME replaces the file.

   fencectl put build-42 report.html report.html --token "$FENCE_TOKEN"
   make test 2>&1 | fencectl put "$FENCE_TASK" test.log - --token "$FENCE_TOKEN"`,
		Flags: fencedFlags(),
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			switch {
			case len(args) == 0:
				return usagef("missing task ID and NAME: usage: %s", c.Command.UsageText)
			case len(args) == 1:
				return usagef("missing NAME, the name of the output: usage: %s", c.Command.UsageText)
			case len(args) > 3:
				return usagef("too many arguments %q: usage: %s", args, c.Command.UsageText)
			}
			id, name := args[0], args[1]
			if err := fence.ValidateID(id); err != nil {
				return err
			}
			if err := fence.ValidateOutputName(name); err != nil {
				return err
			}
			tok, err := requireToken(c)
			if err != nil {
				return err
			}
			src := "-"
			if len(args) == 3 {
				src = args[2]
			}
			content, closeContent, err := openContent(src, out.stdin)
			if err != nil {
				return err
			}
			defer closeContent()
			return withTree(c, out, func(t *fence.Tree) error {
				res, err := t.Put(c.Context, fence.FencedRequest{ID: id, Token: tok, Agent: c.String("agent")}, name, content)
				if err != nil {
					return err
				}
				path := t.OutputPath(id, name)
				j := fencedAnswer(res, tok)
				j.Output, j.Name = path, name
				out.print(j, func(w io.Writer) {
					fmt.Fprintf(w, "%s: wrote %s\n", id, path)
				})
				return nil
			})
		},
	}
}

// openContent opens FILE, or stdin for "-". O_NONBLOCK: a FIFO named by
// mistake is refused instead of waiting forever for a writer.
func openContent(src string, stdin io.Reader) (io.Reader, func(), error) {
	if src == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // "open FILE: …" would name the system call, not the problem
		}
		return nil, nil, usagef("cannot read %s: %v", src, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, usagef("cannot read %s: not a regular file", src)
	}
	return f, func() { f.Close() }, nil
}
