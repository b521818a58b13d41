package topology

import (
	"fmt"
	"strings"
)

// cycles reports each loop of stages (A's output is B's input) once, at the
// input topic of its first stage in file order. A stage reading its own
// output is reported by stages instead. A loop that only dead letters
// close (A's dead letters are B's input, and B's output or dead letters
// A's) is reported too: a record that fails in every stage on it would go
// round for ever, the topics growing without end.
func (v *validator) cycles() {
	stage := func(i int) (namePath, name, at string) {
		return fmt.Sprintf("stages[%d].name", i), v.f.Stages[i].Name, fmt.Sprintf("stages[%d].input.topic", i)
	}
	v.loops(v.f.graph(), "cycle: ", nil, stage)
	plain := make([]int, len(v.f.Stages)) // the component of each stage in the plain graph
	for n, comp := range sccs(v.f.graph()) {
		for _, c := range comp {
			plain[c] = n
		}
	}
	// With dead letters, sinks are nodes too (after the stages): a sink's
	// dead-letter topic read by a stage upstream of it closes a loop.
	ns := len(v.f.Stages)
	node := func(i int) (namePath, name, at string) {
		if i < ns {
			return stage(i)
		}
		j := i - ns
		return fmt.Sprintf("sinks[%d].name", j), "sink " + v.f.Sinks[j].Name, fmt.Sprintf("sinks[%d].input.topic", j)
	}
	v.loops(v.f.deadLetterGraph(), "cycle through dead-letter topics (a record failing on every stage of it would loop for ever; exactly redrive retries dead letters a bounded number of times): ", func(comp []int) bool {
		for _, c := range comp {
			if c >= ns || plain[c] != plain[comp[0]] {
				return false
			}
		}
		return true // a loop without dead letters, reported already
	}, node)
}

// loops reports each loop of adj, its message starting with prefix, but
// none whose nodes seen says were reported already; node names node i
// (the path of its name, the name, and the path the loop is reported at).
func (v *validator) loops(adj [][]int, prefix string, seen func(comp []int) bool, node func(int) (namePath, name, at string)) {
	for _, comp := range sccs(adj) {
		if len(comp) < 2 || seen != nil && seen(comp) {
			continue
		}
		start := comp[0]
		in := make(map[int]bool, len(comp))
		for _, c := range comp {
			in[c] = true
			start = min(start, c)
		}
		loop := shortestLoop(adj, start, in)
		names := make([]string, len(loop))
		onLoop := make(map[int]bool, len(loop))
		for i, s := range loop {
			path, name, _ := node(s)
			names[i] = v.name(path, name)
			onLoop[s] = true
		}
		msg := prefix + strings.Join(names, " -> ")
		var others []string
		for i := range adj {
			if in[i] && !onLoop[i] {
				path, name, _ := node(i)
				others = append(others, v.name(path, name))
			}
		}
		if len(others) > 0 {
			msg += " (also in this loop: " + strings.Join(others, ", ") + ")"
		}
		_, _, at := node(start)
		v.report(at, "%s", msg)
	}
}

// sccs returns the strongly connected components of adj (Tarjan).
func sccs(adj [][]int) [][]int {
	n := len(adj)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var out [][]int
	next := 0
	var visit func(int)
	visit = func(u int) {
		index[u], low[u] = next, next
		next++
		stack = append(stack, u)
		onStack[u] = true
		for _, w := range adj[u] {
			if index[w] < 0 {
				visit(w)
				low[u] = min(low[u], low[w])
			} else if onStack[w] {
				low[u] = min(low[u], index[w])
			}
		}
		if low[u] == index[u] {
			var comp []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == u {
					break
				}
			}
			out = append(out, comp)
		}
	}
	for i := 0; i < n; i++ {
		if index[i] < 0 {
			visit(i)
		}
	}
	return out
}

// shortestLoop returns start, the stages of a shortest path back to it
// within in, and start again.
func shortestLoop(adj [][]int, start int, in map[int]bool) []int {
	prev := map[int]int{}
	queue := []int{start}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, w := range adj[u] {
			if !in[w] {
				continue
			}
			if w == start {
				loop := []int{start}
				for x := u; x != start; x = prev[x] {
					loop = append(loop, x)
				}
				// loop is start, then the path backwards; reverse the path.
				for i, j := 1, len(loop)-1; i < j; i, j = i+1, j-1 {
					loop[i], loop[j] = loop[j], loop[i]
				}
				return append(loop, start)
			}
			if _, seen := prev[w]; !seen && w != start {
				prev[w] = u
				queue = append(queue, w)
			}
		}
	}
	return []int{start, start}
}
