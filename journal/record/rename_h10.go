//go:build ignore

// rename_h10 moves references to the domain's words (issue 10) to package
// journal/record. In every file named on the command line it rewrites
//
//   - journal.X and fence.X to record.X, for X one of the words;
//   - in package journal and package fence, an unqualified X (one the file
//     does not declare itself) to record.X;
//   - and deletes fence's re-exports (X = journal.X type aliases, consts
//     and vars), rewriting the file's own uses of them,
//
// then adds the journal/record import, drops journal and fence imports left
// unused, and gofmts. It is syntactic (go/parser's per-file resolution), so
// it runs on a tree that does not compile yet, e.g. right after a merge:
//
//	git ls-files '*.go' | go run journal/record/rename_h10.go
//
// Comments and strings are left alone. Files it changes are printed; a
// local variable named record, which would hide the package, is reported.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strconv"
	"strings"
)

const (
	journalPath = "github.com/fencectl/fencectl/journal"
	fencePath   = "github.com/fencectl/fencectl/fence"
	recordPath  = "github.com/fencectl/fencectl/journal/record"
)

var words = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`Task State States Lease LeaseEnd Claim Event EventType Defaults
		Available Claimed Done Failed EvAdd EvAdopt EvClaim EvHeartbeat EvComplete EvRelease
		EvFail EvReap EvRevoke EvRequeue EvPut EvMissing`) {
		words[w] = true
	}
}

type edit struct {
	from, to int
	text     string
}

func main() {
	paths := bufio.NewScanner(os.Stdin) // one file name per line
	for paths.Scan() {
		path := paths.Text()
		if err := rewrite(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func rewrite(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := pass(path, src)
	if err != nil || bytes.Equal(out, src) {
		return err
	}
	fmt.Println(path)
	return os.WriteFile(path, out, 0o644)
}

// pass rewrites the words, then fixes the imports on the result.
func pass(path string, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	pkgs := map[string]bool{} // local names of the journal and fence imports
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p == journalPath || p == fencePath {
			pkgs[importName(im, p)] = true
		}
	}
	var edits []edit
	removed := map[ast.Node]bool{} // fence's alias specs, deleted
	inside := f.Name.Name == "journal" || f.Name.Name == "fence"
	if f.Name.Name == "fence" {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok == token.IMPORT {
				continue
			}
			var keep int
			for _, s := range g.Specs {
				if reexport(s, pkgs) {
					removed[s] = true
				} else {
					keep++
				}
			}
			switch {
			case keep == 0 && len(g.Specs) > 0:
				from := off(g.Pos())
				if g.Doc != nil {
					from = off(g.Doc.Pos())
				}
				edits = append(edits, edit{from, off(g.End()), ""})
			case keep < len(g.Specs):
				for _, s := range g.Specs {
					if removed[s] {
						edits = append(edits, edit{specStart(s, off), off(s.End()), ""})
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && pkgs[x.Name] && x.Obj == nil && words[n.Sel.Name] {
				edits = append(edits, edit{off(n.Pos()), off(n.End()), "record." + n.Sel.Name})
			}
			return true
		case *ast.Ident:
			if n.Name == "record" && n.Obj != nil {
				fmt.Fprintf(os.Stderr, "%s: a local name record hides the package: rename it\n", fset.Position(n.Pos()))
			}
			if inside && words[n.Name] && n.Obj != nil && removed[declSpec(n.Obj)] && !isDeclName(n) {
				edits = append(edits, edit{off(n.Pos()), off(n.End()), "record." + n.Name})
			}
		}
		return true
	})
	if inside {
		for _, id := range f.Unresolved {
			if words[id.Name] {
				edits = append(edits, edit{off(id.Pos()), off(id.End()), "record." + id.Name})
			}
		}
	}
	if len(edits) == 0 {
		return src, nil
	}
	return fixImports(path, apply(src, edits))
}

// reexport reports whether s is `X = journal.X` for one of the words.
func reexport(s ast.Spec, pkgs map[string]bool) bool {
	isSel := func(e ast.Expr, name string) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && pkgs[x.Name] && sel.Sel.Name == name
	}
	switch s := s.(type) {
	case *ast.TypeSpec:
		return s.Assign.IsValid() && words[s.Name.Name] && isSel(s.Type, s.Name.Name)
	case *ast.ValueSpec:
		return len(s.Names) == 1 && len(s.Values) == 1 && words[s.Names[0].Name] && isSel(s.Values[0], s.Names[0].Name)
	}
	return false
}

func specStart(s ast.Spec, off func(token.Pos) int) int {
	switch s := s.(type) {
	case *ast.TypeSpec:
		if s.Doc != nil {
			return off(s.Doc.Pos())
		}
	case *ast.ValueSpec:
		if s.Doc != nil {
			return off(s.Doc.Pos())
		}
	}
	return off(s.Pos())
}

func declSpec(o *ast.Object) ast.Node {
	n, _ := o.Decl.(ast.Node)
	return n
}

// isDeclName reports whether id is the name a removed spec declares.
func isDeclName(id *ast.Ident) bool {
	switch s := id.Obj.Decl.(type) {
	case *ast.TypeSpec:
		return s.Name == id
	case *ast.ValueSpec:
		return len(s.Names) > 0 && s.Names[0] == id
	}
	return false
}

func importName(im *ast.ImportSpec, p string) string {
	if im.Name != nil {
		return im.Name.Name
	}
	return p[strings.LastIndex(p, "/")+1:]
}

// apply makes the edits; one inside another's range (a reference inside
// a deleted re-export) is dropped for the enclosing one.
func apply(src []byte, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool {
		if edits[i].from != edits[j].from {
			return edits[i].from < edits[j].from
		}
		return edits[i].to > edits[j].to
	})
	var kept []edit
	for _, e := range edits {
		if n := len(kept); n > 0 && e.from < kept[n-1].to {
			continue
		}
		kept = append(kept, e)
	}
	out := append([]byte(nil), src...)
	for i := len(kept) - 1; i >= 0; i-- {
		e := kept[i]
		out = append(out[:e.from:e.from], append([]byte(e.text), out[e.to:]...)...)
	}
	return out
}

// fixImports adds journal/record where record. is used and drops journal
// and fence imports nothing uses any more, then gofmts (which sorts them).
func fixImports(path string, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("%s after rewrite: %w", path, err)
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Obj == nil {
				used[x.Name] = true
			}
		}
		return true
	})
	var edits []edit
	haveRecord := false
	var anchor *ast.ImportSpec // where record goes: beside journal or fence
	var unused []*ast.ImportSpec
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		switch p {
		case recordPath:
			haveRecord = true
		case journalPath, fencePath:
			if anchor == nil {
				anchor = im
			}
			if !used[importName(im, p)] {
				unused = append(unused, im)
			}
		}
	}
	if used["record"] && !haveRecord {
		switch {
		case len(unused) > 0: // record takes the place of an import gone unused
			edits = append(edits, edit{off(unused[0].Pos()), off(unused[0].End()), strconv.Quote(recordPath)})
			unused = unused[1:]
		case anchor != nil && parenthesised(f):
			edits = append(edits, edit{off(anchor.End()), off(anchor.End()), "\n\t" + strconv.Quote(recordPath)})
		case parenthesised(f): // a group of its own after the others
			last := f.Imports[len(f.Imports)-1]
			edits = append(edits, edit{off(last.End()), off(last.End()), "\n\n\t" + strconv.Quote(recordPath)})
		default:
			edits = append(edits, edit{off(f.Name.End()), off(f.Name.End()), "\n\nimport " + strconv.Quote(recordPath)})
		}
	}
	for _, im := range unused {
		from, to := off(im.Pos()), off(im.End())
		if !parenthesised(f) {
			from = off(f.Decls[0].Pos()) // import "x": the whole declaration
		}
		if to < len(src) && src[to] == '\n' {
			to++
		}
		edits = append(edits, edit{from, to, ""})
	}
	return format.Source(apply(src, edits))
}

// parenthesised reports whether the file's first import declaration is
// import ( ... ).
func parenthesised(f *ast.File) bool {
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			return g.Lparen.IsValid()
		}
	}
	return false
}
