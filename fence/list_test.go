package fence_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// listIDs runs List and returns the ids of the page and whether more
// follow, failing the test on error.
func listIDs(t *testing.T, tree *fence.Tree, f fence.ListFilter) ([]string, bool) {
	t.Helper()
	p, err := tree.List(bg, f)
	if err != nil {
		t.Fatalf("List(%+v): %v", f, err)
	}
	var ids []string
	for _, r := range p.Tasks {
		ids = append(ids, r.ID)
	}
	return ids, p.More
}

// TestTree_List: tasks in id order, a page at a time from the cursor,
// More only when the filter selects another task after the page; the
// state and agent filters apply before the limit counts.
func TestTree_List(t *testing.T) {
	tree := newTree(t)
	for _, id := range []string{"e", "b", "d", "a", "c", "f"} {
		add(t, tree, id, 0)
	}
	claim(t, tree, "b", "a1")
	claim(t, tree, "e", "a1")
	claim(t, tree, "c", "a2")
	for _, c := range []struct {
		name string
		f    fence.ListFilter
		want []string
		more bool
	}{
		{"all", fence.ListFilter{}, []string{"a", "b", "c", "d", "e", "f"}, false},
		{"first page", fence.ListFilter{Limit: 2}, []string{"a", "b"}, true},
		{"second page", fence.ListFilter{Limit: 2, After: "b"}, []string{"c", "d"}, true},
		{"last page, full", fence.ListFilter{Limit: 2, After: "d"}, []string{"e", "f"}, false},
		{"cursor between ids", fence.ListFilter{Limit: 2, After: "b5"}, []string{"c", "d"}, true},
		{"past the end", fence.ListFilter{After: "g"}, nil, false},
		{"state", fence.ListFilter{State: record.Available}, []string{"a", "d", "f"}, false},
		{"state, paged", fence.ListFilter{State: record.Claimed, Limit: 2}, []string{"b", "c"}, true},
		{"state, last page", fence.ListFilter{State: record.Claimed, Limit: 2, After: "c"}, []string{"e"}, false},
		{"state none", fence.ListFilter{State: record.Done}, nil, false},
		// No More when the only tasks after the page are filtered out.
		{"agent, nothing after", fence.ListFilter{Agent: "a2", Limit: 1}, []string{"c"}, false},
		{"agent", fence.ListFilter{Agent: "a1"}, []string{"b", "e"}, false},
		{"agent and claimed", fence.ListFilter{Agent: "a1", State: record.Claimed, Limit: 1}, []string{"b"}, true},
		{"unknown agent", fence.ListFilter{Agent: "nobody"}, nil, false},
	} {
		got, more := listIDs(t, tree, c.f)
		if !reflect.DeepEqual(got, c.want) || more != c.more {
			t.Errorf("%s: List(%+v) = %v, more %v; want %v, more %v", c.name, c.f, got, more, c.want, c.more)
		}
	}
	// The records are the journal's, as Show reads them.
	p, err := tree.List(bg, fence.ListFilter{Agent: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := tree.Show(bg, "c")
	if err != nil || len(p.Tasks) != 1 || !reflect.DeepEqual(p.Tasks[0], v.Task) {
		t.Errorf("List gave %+v; Show(c) = %+v, %v", p.Tasks, v.Task, err)
	}
}

// TestTree_ListRefusals: each bad input is an *InvalidInputError naming
// the input and the rule.
func TestTree_ListRefusals(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "a", 0)
	for _, c := range []struct {
		f     fence.ListFilter
		input fence.Input
		rule  fence.Rule
	}{
		{fence.ListFilter{State: "running"}, fence.InputState, fence.RuleFormat},
		{fence.ListFilter{State: "Available"}, fence.InputState, fence.RuleFormat},
		{fence.ListFilter{After: "a/b"}, fence.InputAfter, fence.RuleFormat},
		{fence.ListFilter{After: ".hidden"}, fence.InputAfter, fence.RuleFormat},
		{fence.ListFilter{Limit: -1}, fence.InputLimit, fence.RuleRange},
		{fence.ListFilter{Agent: "a1", State: record.Done}, fence.InputState, fence.RuleConflict},
	} {
		_, err := tree.List(bg, c.f)
		var ie *fence.InvalidInputError
		if !errors.As(err, &ie) || ie.Input != c.input || ie.Rule != c.rule {
			t.Errorf("List(%+v): %v; want an invalid %s (%s)", c.f, err, c.input, c.rule)
		}
	}
}
