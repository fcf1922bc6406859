//go:build !noserve

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal/record"
)

// The JSON API of serve: every answer is the shape the matching command
// prints with --json (status, list, show, log), and every error is the
// --json error object with an HTTP status that says the same.

// defaultEventLimit is how many events /api/events returns unless
// ?limit says otherwise.
const defaultEventLimit = 100

// streamPage bounds the events one read of a stream sends.
const streamPage = 500

// keepAlive is how often an idle stream sends a comment, so that proxies
// and browsers keep it open.
const keepAlive = 25 * time.Second

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/status", s.apiStatus)
	mux.HandleFunc("GET /api/tasks", s.apiTasks)
	mux.HandleFunc("GET /api/tasks/{id}", s.apiTask)
	mux.HandleFunc("GET /api/tasks/{id}/outputs", s.apiOutputs)
	mux.HandleFunc("GET /api/tasks/{id}/outputs/{name}", s.apiOutput)
	mux.HandleFunc("GET /api/events", s.apiEvents)
	mux.HandleFunc("GET /api/stream", s.apiStream)
	mux.HandleFunc("GET /metrics", s.metricsHandler)
	mux.HandleFunc("GET /{$}", s.pageTree)
	mux.HandleFunc("GET /task/{id}", s.pageTask)
	mux.Handle("GET /static/", staticFiles())
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.apiError(w, usagef("no such API endpoint %s %s: see `fencectl serve --help` for the list", r.Method, r.URL.Path))
	})
	return secureHeaders(mux)
}

// secureHeaders sets what every answer carries: no content sniffing (a
// JSON answer or a download is never read as HTML), no framing, no
// referrer, and a content policy that runs the embedded script only.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}

func (s *server) writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	s.out.writeJSON(w, v)
}

// apiError answers err as the --json error object.
func (s *server) apiError(w http.ResponseWriter, err error) {
	obj := classify(err)
	status := http.StatusInternalServerError
	switch obj.Code {
	case exitUsage:
		status = http.StatusBadRequest
	case exitNoSuchTask:
		status = http.StatusNotFound
	case exitBusy:
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	s.out.writeJSON(w, obj)
}

func (s *server) apiStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.tree.Status(r.Context())
	if err != nil {
		s.apiError(w, err)
		return
	}
	s.writeJSON(w, newStatus(st))
}

// apiTasks is list --json: ?state, ?agent, ?after, ?limit (default 100,
// 0 all). The header Fence-More says whether another page follows.
func (s *server) apiTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultListLimit)
	if err != nil {
		s.apiError(w, err)
		return
	}
	if err := checkText("agent", q.Get("agent")); err != nil {
		s.apiError(w, err)
		return
	}
	f := fence.ListFilter{State: record.State(q.Get("state")), Agent: q.Get("agent"), After: q.Get("after"), Limit: limit}
	p, err := s.tree.List(r.Context(), f)
	if err != nil {
		s.apiError(w, err)
		return
	}
	tasks := make([]*taskJSON, 0, len(p.Tasks))
	for _, t := range p.Tasks {
		tasks = append(tasks, newTask(t, s.tree.Path(t.ID, t.State)))
	}
	w.Header().Set("Fence-More", strconv.FormatBool(p.More))
	s.writeJSON(w, tasks)
}

func (s *server) apiTask(w http.ResponseWriter, r *http.Request) {
	v, err := s.tree.Show(r.Context(), r.PathValue("id"))
	if err != nil {
		s.apiError(w, err)
		return
	}
	s.writeJSON(w, newShow(v))
}

// outputJSON is one output of a task, as /api/tasks/ID/outputs lists it.
type outputJSON struct {
	Modified time.Time `json:"modified"`
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
}

// apiOutputs lists out/ID/: the regular files whose names are valid
// output names (anything else there was not written by put, and is left
// out).
func (s *server) apiOutputs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.tree.Show(r.Context(), id); err != nil { // validates id; 404 if unknown
		s.apiError(w, err)
		return
	}
	list := []outputJSON{}
	root, err := os.OpenRoot(filepath.Join(s.tree.Root(), string(fsmirror.Out)))
	if errors.Is(err, fs.ErrNotExist) {
		s.writeJSON(w, list)
		return
	}
	if err != nil {
		s.apiError(w, err)
		return
	}
	defer root.Close()
	if fi, err := root.Lstat(id); errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		s.writeJSON(w, list)
		return
	}
	dir, err := root.Open(id)
	if err != nil {
		s.apiError(w, err)
		return
	}
	defer dir.Close()
	entries, err := dir.ReadDir(-1)
	if err != nil {
		s.apiError(w, err)
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || fsmirror.ValidateOutputName(e.Name()) != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		list = append(list, outputJSON{Modified: fi.ModTime().UTC(), Name: e.Name(), Size: fi.Size()})
	}
	s.writeJSON(w, list)
}

// apiOutput sends out/ID/NAME as a download: attachment, octet-stream,
// never rendered. The file is opened inside out/ (os.Root), not
// following a symlink at its name, so nothing outside the tree can be
// read through it.
func (s *server) apiOutput(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("id"), r.PathValue("name")
	if _, err := s.tree.Show(r.Context(), id); err != nil {
		s.apiError(w, err)
		return
	}
	if err := fence.ValidateOutputName(name); err != nil {
		s.apiError(w, err)
		return
	}
	notFound := func() {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		s.out.writeJSON(w, errorObject{Code: exitNoSuchTask, Reason: fence.ReasonNoSuchTask, Task: id,
			Message: fmt.Sprintf("task %s has no output %q: /api/tasks/%s/outputs lists them", id, name, id)})
	}
	root, err := os.OpenRoot(filepath.Join(s.tree.Root(), string(fsmirror.Out)))
	if err != nil {
		notFound()
		return
	}
	defer root.Close()
	f, err := root.OpenFile(filepath.Join(id, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		notFound()
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		notFound()
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(name))
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.Copy(w, f)
}

// apiEvents is log --json as one array: ?after=SEQ gives the events after
// it, oldest first; without it, the newest ?limit (default 100). ?task
// and ?heartbeats=1 filter as log's flags do. The header Fence-Last-Seq
// is where the next read starts (?after), past heartbeats left out.
func (s *server) apiEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultEventLimit)
	if err != nil {
		s.apiError(w, err)
		return
	}
	heartbeats := q.Get("heartbeats") == "1" || q.Get("heartbeats") == "true"
	task := q.Get("task")
	if !q.Has("after") {
		evs, err := s.tree.Log(r.Context(), fence.LogFilter{Task: task, Limit: limit, Heartbeats: heartbeats})
		if err != nil {
			s.apiError(w, err)
			return
		}
		var last uint64
		if len(evs) > 0 {
			last = evs[len(evs)-1].Seq
		}
		w.Header().Set("Fence-Last-Seq", strconv.FormatUint(last, 10))
		s.writeJSON(w, newEvents(evs))
		return
	}
	after, err := seqParam(q.Get("after"))
	if err != nil {
		s.apiError(w, err)
		return
	}
	if task != "" {
		if err := fence.ValidateID(task); err != nil {
			s.apiError(w, err)
			return
		}
	}
	p, err := s.tree.EventsAfter(r.Context(), after, limit, heartbeats)
	if err != nil {
		s.apiError(w, err)
		return
	}
	evs := p.Events
	if task != "" {
		evs = evs[:0:0]
		for _, e := range p.Events {
			if e.Task == task {
				evs = append(evs, e)
			}
		}
	}
	w.Header().Set("Fence-Last-Seq", strconv.FormatUint(p.Last, 10))
	s.writeJSON(w, newEvents(evs))
}

// apiStream is a server-sent event stream: every journal event after
// ?after (or the Last-Event-ID a reconnecting browser sends; without
// either, from now on) as "event" with the event's seq as its id, and
// after each batch a "status" with status --json. Heartbeats are sent
// only with ?heartbeats=1 (status reflects the deadlines they move). It
// reads the journal when the watch says it changed, never on a timer.
func (s *server) apiStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	heartbeats := q.Get("heartbeats") == "1" || q.Get("heartbeats") == "true"
	var cursor uint64
	from := q.Get("after")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from = id
	}
	if from != "" {
		var err error
		if cursor, err = seqParam(from); err != nil {
			s.apiError(w, err)
			return
		}
	} else {
		g, err := s.tree.Gauges(r.Context())
		if err != nil {
			s.apiError(w, err)
			return
		}
		cursor = g.LastSeq
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.apiError(w, errors.New("this connection cannot stream"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 2000\n\n")
	flusher.Flush()
	ctx := r.Context()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		// Take the wake-up channel before reading, so that a commit after
		// the read wakes the next round.
		woken, open := s.feed.Wait()
		if !open {
			return
		}
		sent, err := s.streamOnce(w, r, &cursor, heartbeats)
		if err != nil {
			return // the client is gone, or the journal cannot be read: the browser reconnects
		}
		if sent {
			flusher.Flush()
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-woken:
				break wait
			case <-ping.C:
				if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
					return
				}
				flusher.Flush()
			}
		}
	}
}

// streamOnce sends the events after *cursor, page by page, then the
// status if any event (heartbeats too) came; it reports whether it wrote.
func (s *server) streamOnce(w http.ResponseWriter, r *http.Request, cursor *uint64, heartbeats bool) (bool, error) {
	moved := false
	for {
		p, err := s.tree.EventsAfter(r.Context(), *cursor, streamPage, heartbeats)
		if err != nil {
			return moved, err
		}
		for _, e := range newEvents(p.Events) {
			if err := writeSSE(w, "event", strconv.FormatUint(e.Seq, 10), e); err != nil {
				return moved, err
			}
		}
		if p.Last == *cursor {
			break
		}
		*cursor, moved = p.Last, true
	}
	if !moved {
		return false, nil
	}
	st, err := s.tree.Status(r.Context())
	if err != nil {
		return true, err
	}
	return true, writeSSE(w, "status", "", newStatus(st))
}

// writeSSE writes one server-sent event; data is one line of JSON (JSON
// escapes newlines, so it never breaks the framing).
func writeSSE(w io.Writer, event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if id != "" {
		if _, err := fmt.Fprintf(w, "id: %s\n", id); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	return err
}

// intParam reads a non-negative integer query parameter.
func intParam(q url.Values, name string, def int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, usagef("invalid %s=%q: give a whole number, 0 or more", name, truncate(v, 80))
	}
	return n, nil
}

// seqParam reads an event sequence number.
func seqParam(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, usagef("invalid after=%q: give the sequence number of an event (0 for the start)", truncate(v, 80))
	}
	return n, nil
}
