//go:build !noserve

package main

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/fencectl/fencectl/fence"
)

// The page: static HTML, CSS and a script, embedded in the binary (it
// works offline, from no CDN). The HTML holds no data at all: the script
// fetches it from the API and writes it with textContent, so an id, agent
// name, reason or output name is never parsed as markup.

//go:embed web
var webFS embed.FS

func (s *server) pageTree(w http.ResponseWriter, r *http.Request) {
	servePage(w, "web/index.html")
}

// pageTask serves the page of one task; an id that breaks the id rule is
// refused here, before any script runs.
func (s *server) pageTask(w http.ResponseWriter, r *http.Request) {
	if err := fence.ValidateID(r.PathValue("id")); err != nil {
		http.Error(w, "fencectl: "+err.Error(), http.StatusBadRequest)
		return
	}
	servePage(w, "web/task.html")
}

func servePage(w http.ResponseWriter, name string) {
	b, err := webFS.ReadFile(name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// staticFiles serves web/ under /static/ (the CSS and the script).
func staticFiles() http.Handler {
	sub, err := fs.Sub(webFS, "web")
	if err != nil {
		panic(err) // the embed is made at build time
	}
	return http.StripPrefix("/static/", http.FileServerFS(sub))
}
