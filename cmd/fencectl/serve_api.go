//go:build !noserve

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

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

// maxEventLimit is the most events one answer of /api/events holds
// (?limit=0, "all", included): a read of the whole log would hold the
// journal's lock, and serve's one turn to read it, for as long as it
// takes. A client that wants it all pages through it with ?after and
// Fence-More.
const maxEventLimit = 1000

// maxTaskLimit is the most tasks one answer of /api/tasks holds (see
// apiTasks).
const maxTaskLimit = 1000

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
		// An endpoint asked with another method than GET: 405, as
		// the mux answers one outside /api/, but as an error object.
		if _, pattern := mux.Handler(asGet(r)); pattern != "/api/" {
			w.Header().Set("Allow", "GET, HEAD")
			s.writeError(w, http.StatusMethodNotAllowed, classify(usagef("method %s not allowed on %s: the API is read-only (GET, HEAD)", r.Method, r.URL.Path)))
			return
		}
		// No such resource: 404, as for an unknown task (the body says
		// which endpoints there are).
		s.writeError(w, http.StatusNotFound, classify(usagef("no such API endpoint %s %s: see `fencectl serve --help` for the list", r.Method, r.URL.Path)))
	})
	var h http.Handler = mux
	if s.loopback {
		h = s.loopbackOnly(h)
	}
	return secureHeaders(h)
}

// asGet is r as a GET, to ask the mux whether a GET of its path has a route.
func asGet(r *http.Request) *http.Request {
	get := r.WithContext(r.Context()) // a shallow copy
	get.Method = http.MethodGet
	return get
}

// loopbackOnly refuses a request whose Host is not a loopback name or
// address, against DNS rebinding: a web page whose own name the attacker
// makes resolve to 127.0.0.1 would reach a loopback serve with its name
// as Host, and the browser would let its script read the answers (the
// API, the outputs) as its own. A loopback IP and localhost, *.localhost
// (which browsers resolve to loopback themselves, never by DNS) cannot
// be rebound. A serve on another address is open to the network anyway,
// by choice (--http warns), and answers any Host.
func (s *server) loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackHost(r.Host) {
			h.ServeHTTP(w, r)
			return
		}
		msg := fmt.Sprintf("Host %s refused: this serve listens on a loopback address and answers only the Host names localhost, *.localhost, 127.0.0.0/8 and [::1] (any port), against DNS rebinding", strconv.QuoteToGraphic(truncate(r.Host, 80)))
		if strings.HasPrefix(r.URL.Path, "/api/") {
			s.writeError(w, http.StatusMisdirectedRequest, classify(usagef("%s", msg)))
			return
		}
		http.Error(w, "fencectl: "+msg, http.StatusMisdirectedRequest)
	})
}

// loopbackHost reports whether a Host header (with or without a port)
// names the loopback interface: localhost, a name under .localhost, or a
// loopback IP.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
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

// apiError answers err as the --json error object, an input the API
// takes named by its query parameter, not by the flag of the command.
func (s *server) apiError(w http.ResponseWriter, err error) {
	obj := classify(err)
	var invalid *fence.InvalidInputError
	if errors.As(err, &invalid) && invalid.Msg == "" {
		if name, ok := paramOf[invalid.Input]; ok {
			obj.Message = reword(err, invalid, paramMessage(name, invalid))
		}
	}
	status := http.StatusInternalServerError
	switch obj.Code {
	case exitUsage:
		status = http.StatusBadRequest
	case exitNoSuchTask:
		status = http.StatusNotFound
	case exitBusy:
		status = http.StatusServiceUnavailable
	}
	s.writeError(w, status, obj)
}

func (s *server) writeError(w http.ResponseWriter, status int, obj errorObject) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	s.out.writeJSON(w, obj)
}

// paramOf names the query parameter that sets each of the domain's
// inputs the API passes on (errors.go's flagOf names the flags).
var paramOf = map[fence.Input]string{
	fence.InputState: "state",
	fence.InputAfter: "after",
	fence.InputLimit: "limit",
}

// paramMessage words an invalid input as the API's own checks do:
// invalid NAME="VALUE": WANT.
func paramMessage(name string, e *fence.InvalidInputError) string {
	if e.Rule == fence.RuleMissing || e.Value == nil {
		return e.Describe(name)
	}
	msg := fmt.Sprintf("invalid %s=%q", name, truncate(fmt.Sprint(e.Value), 80))
	if e.Want != "" {
		msg += ": " + e.Want
	}
	return msg
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
	// At most maxTaskLimit a page, limit=0 included: one answer of a
	// million tasks held the journal's read lock (and so every writer)
	// for the whole read, and each client that did not read its answer
	// kept all of it in memory. Fence-More says to go on with ?after.
	if limit == 0 || limit > maxTaskLimit {
		limit = maxTaskLimit
	}
	if err := textParam(q, "agent"); err != nil {
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
	root, err := s.openOut()
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

// openOut opens the tree's out/ as an os.Root, refusing anything but a
// real directory in its place (fs.ErrNotExist): os.OpenRoot follows a
// symlink, and a running serve would then hand out files from wherever
// one planted there points. The directory opened is checked to be the one
// looked at, so a swap in between is refused too.
func (s *server) openOut() (*os.Root, error) {
	path := filepath.Join(s.tree.Root(), string(fsmirror.Out))
	before, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !before.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	if after, err := root.Stat("."); err != nil || !os.SameFile(before, after) {
		root.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return root, nil
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
	root, err := s.openOut()
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
// and ?heartbeats filter as log's flags do. The header Fence-Last-Seq
// is where the next read starts (?after), past heartbeats left out.
// ?limit is at most maxEventLimit (0 is that much); Fence-More says
// whether the answer stopped short of the rest: more events after
// Fence-Last-Seq, or without ?after, older ones before the first.
func (s *server) apiEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultEventLimit)
	if err != nil {
		s.apiError(w, err)
		return
	}
	if limit == 0 || limit > maxEventLimit {
		limit = maxEventLimit
	}
	heartbeats, err := boolParam(q, "heartbeats")
	if err != nil {
		s.apiError(w, err)
		return
	}
	task := q.Get("task")
	// One more than asked is read, to learn whether more follow.
	if !q.Has("after") {
		evs, err := s.tree.Log(r.Context(), fence.LogFilter{Task: task, Limit: limit + 1, Heartbeats: heartbeats})
		if err != nil {
			s.apiError(w, err)
			return
		}
		more := len(evs) > limit
		if more {
			evs = evs[1:]
		}
		var last uint64
		if len(evs) > 0 {
			last = evs[len(evs)-1].Seq
		}
		s.writeEvents(w, evs, last, more)
		return
	}
	after, err := seqParam(q.Get("after"))
	if err != nil {
		s.apiError(w, err)
		return
	}
	if task != "" {
		// An unknown task is 404, as without ?after (Log checks it).
		if _, err := s.tree.Log(r.Context(), fence.LogFilter{Task: task, Limit: 1}); err != nil {
			s.apiError(w, err)
			return
		}
	}
	// Heartbeats are read and left out here, so that the count read,
	// and the seq of the limit-th event, are known.
	p, err := s.tree.EventsAfter(r.Context(), after, limit+1, true)
	if err != nil {
		s.apiError(w, err)
		return
	}
	read := p.Events
	more := len(read) > limit
	if more {
		read = read[:limit]
		p.Last = read[limit-1].Seq
	}
	evs := []record.Event{}
	for _, e := range read {
		if (heartbeats || e.Type != record.EvHeartbeat) && (task == "" || e.Task == task) {
			evs = append(evs, e)
		}
	}
	s.writeEvents(w, evs, p.Last, more)
}

func (s *server) writeEvents(w http.ResponseWriter, evs []record.Event, last uint64, more bool) {
	w.Header().Set("Fence-Last-Seq", strconv.FormatUint(last, 10))
	w.Header().Set("Fence-More", strconv.FormatBool(more))
	s.writeJSON(w, newEvents(evs))
}

// apiStream is a server-sent event stream: every journal event after
// ?after (or the Last-Event-ID a reconnecting browser sends; without
// either, from now on) as "event" with the event's seq as its id, and
// after each batch a "status" with status --json. Heartbeats are sent
// only with ?heartbeats (status reflects the deadlines they move). It
// reads the journal when the watch says it changed, never on a timer.
func (s *server) apiStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	heartbeats, err := boolParam(q, "heartbeats")
	if err != nil {
		s.apiError(w, err)
		return
	}
	var cursor uint64
	from := q.Get("after")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from = id
	}
	if from != "" {
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

// boolParam reads a boolean query parameter as the CLI reads a boolean
// flag: absent is false, a bare ?name true, else one of the spellings of
// strconv.ParseBool; anything else is refused, not read as false.
func boolParam(q url.Values, name string) (bool, error) {
	if !q.Has(name) {
		return false, nil
	}
	v := q.Get(name)
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, usagef("invalid %s=%q: give true or false (also 1, t, T, TRUE, True; 0, f, F, FALSE, False)", name, truncate(v, 80))
	}
	return b, nil
}

// textParam refuses a text query parameter with control characters, as
// checkText refuses a flag's.
func textParam(q url.Values, name string) error {
	v := q.Get(name)
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return usagef("invalid %s=%s: control characters are not allowed", name, strconv.QuoteToGraphic(truncate(v, 80)))
	}
	return nil
}

// seqParam reads an event sequence number.
func seqParam(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, usagef("invalid after=%q: give the sequence number of an event (0 for the start)", truncate(v, 80))
	}
	return n, nil
}
