package main

// An agent never learns another's token from fencectl: a refusal does not
// show the holder's, a retried complete does not carry the live lease
// (fence.Result.MovedOn), and the MCP tools that read the tree (status,
// show, list, log) show every token as 0. Without that, an agent refused
// as stale could read the live token in `show` and complete the task with
// its stale work under the new holder's name. An agent's own token comes
// from its claim; one that lost it claims again with its request_id.
// (The CLI's status and show, for people at the tree's host, still name
// tokens, as the journal itself does to the user who owns it.)

// redactShow zeroes the tokens of a show answer.
func redactShow(v *showJSON) *showJSON {
	if v.Lease != nil {
		v.Lease.Token = 0
	}
	redactEvents(v.Events)
	return v
}

// redactStatus zeroes the tokens of a status answer.
func redactStatus(v *statusJSON) *statusJSON {
	v.LastToken = 0
	for i := range v.Leases {
		v.Leases[i].Token = 0
	}
	return v
}

// redactTasks zeroes the lease tokens of listed tasks.
func redactTasks(ts []*taskJSON) {
	for _, t := range ts {
		if t.Lease != nil {
			t.Lease.Token = 0
		}
	}
}

// redactEvents zeroes the tokens of events.
func redactEvents(evs []eventJSON) {
	for i := range evs {
		evs[i].Token = 0
	}
}
