package etcd

// Reading the ready index a window at a time.
//
// etcd answers a range read with the number of keys in the whole range,
// whatever its limit: it walks every key from the start of the range to
// its end (live or deleted) to count them. So a page of 16 ready keys
// read up to the end of the index cost a walk over every available task,
// in every transaction: at 12,000 tasks that made the claim rate fall to
// two thirds of a small tree's.
//
// Ready keys sort by priority, then by the task's seq; a page is read
// only up to the end of a window of seqs within the first key's priority
// (readySpan to twice that, aligned, so that one page read from anywhere
// in a window serves a scan from anywhere else in it: floor.go). A scan
// that needs more reads the next window; one that finds a window empty
// (a gap in the seqs, or the end of a priority) reads on to the index's
// end once, to jump the gap.

// readySpan is the width of a ready window, in seqs.
const readySpan = 128

// readyPageEnd is where a ready page read from key from (a full key)
// ends: the end of the window from's seq falls in, or hi if that is
// nearer, or hi if from is not a ready key (the index's start).
func readyPageEnd(readyPrefix, from, hi string) string {
	rel := from[min(len(from), len(readyPrefix)):]
	if len(rel) < 16 || from[:len(readyPrefix)] != readyPrefix {
		return hi
	}
	prio := rel[:8]
	seq := getU64(rel[8:16])
	end := rangeEnd(readyPrefix + prio)
	if w := (seq/readySpan + 2) * readySpan; w > seq {
		end = min(end, readyPrefix+prio+u64(w))
	}
	return min(end, hi)
}
