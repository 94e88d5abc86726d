package rls

import "go.yaml.in/yaml/v3"

// maxExpanded bounds the nodes a file's aliases may add, beyond those written in it (which the
// file's size bounds). A config sharing its rate limits through anchors stays far below it; a
// file of nested aliases that doubles at each level (a "billion laughs") reaches it after a few
// levels instead of exhausting memory.
const maxExpanded = 1 << 20

// expander replaces every alias in a YAML tree with a copy of the node it names and applies every
// merge key (<<), as envoyproxy/ratelimit's YAML decoding does, so that a config sharing a
// rate_limit through an anchor loads the same in both. The parser then sees plain maps, lists and
// scalars, and its checks (unknown and duplicate fields, kinds, lines) apply to what the aliases
// stand for. A node copied from an anchor keeps the anchor's line, which errors inside it name.
type expander struct {
	p      *parser
	left   int                 // nodes aliases may still add (see maxExpanded)
	inside map[*yaml.Node]bool // anchors being expanded: an alias to one of them is a cycle
}

func expand(p *parser, n *yaml.Node) (*yaml.Node, error) {
	e := &expander{p: p, left: maxExpanded, inside: map[*yaml.Node]bool{}}
	return e.node(n)
}

func (e *expander) node(n *yaml.Node) (*yaml.Node, error) {
	if len(e.inside) > 0 {
		// A copy made for an alias: only these can grow past what the file's size allows.
		if e.left--; e.left < 0 {
			return nil, e.p.errf(n, "aliases add more than %d YAML nodes to the file", maxExpanded)
		}
	}
	switch n.Kind {
	case yaml.AliasNode:
		t := n.Alias
		if t == nil || e.inside[t] {
			return nil, e.p.errf(n, "alias *%s refers to a node that contains it", n.Value)
		}
		e.inside[t] = true
		out, err := e.node(t)
		delete(e.inside, t)
		return out, err
	case yaml.MappingNode:
		return e.mapping(n)
	case yaml.SequenceNode, yaml.DocumentNode:
		c := *n
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, child := range n.Content {
			var err error
			if c.Content[i], err = e.node(child); err != nil {
				return nil, err
			}
		}
		return &c, nil
	}
	return n, nil // a scalar: shared, as nothing writes it
}

// mapping copies a map with its merge keys applied as envoyproxy/ratelimit's YAML library
// (gopkg.in/yaml.v2) applies them when it decodes a config: in document order, each field, given
// or merged, setting its value over any earlier one (a field written before a merge key is
// overwritten by a merged one), the maps of a merge list from the last to the first (so the first
// wins), and a map set over a map combining with it, field by field, as decoding into the struct
// already there does (a descriptor's rate_limit). A field given twice in the map itself is kept
// twice, for the parser to report.
func (e *expander) mapping(n *yaml.Node) (*yaml.Node, error) {
	f := fieldSetter{at: map[string]int{}}
	given := map[string]bool{} // fields the map itself gives
	set := func(k, v *yaml.Node, own bool) {
		f.set(k, v, own && given[k.Value])
		if own && k.Kind == yaml.ScalarNode {
			given[k.Value] = true
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := e.node(n.Content[i])
		if err != nil {
			return nil, err
		}
		v, err := e.node(n.Content[i+1])
		if err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!merge" {
			set(k, v, true)
			continue
		}
		maps := []*yaml.Node{v}
		if raw := n.Content[i+1]; raw.Kind == yaml.AliasNode && v.Kind != yaml.MappingNode {
			// yaml.v2 reads a list of maps only when it is written in place.
			return nil, e.p.errf(raw, "the merge key << is given an alias to %s, want a map (a list of maps must be written in place)", kindName(v))
		}
		if v.Kind == yaml.SequenceNode {
			maps = v.Content
		}
		for _, m := range maps {
			if m.Kind != yaml.MappingNode {
				return nil, e.p.errf(m, "the merge key << is given %s, want a map or a list of maps", kindName(m))
			}
		}
		for j := len(maps) - 1; j >= 0; j-- {
			m := maps[j]
			for i := 0; i+1 < len(m.Content); i += 2 {
				set(m.Content[i], m.Content[i+1], false)
			}
		}
	}
	c := *n
	c.Content = f.content
	return &c, nil
}

// fieldSetter builds a map's fields, each set over any earlier one of its name, a map set over a
// map combining with it (see combine). Keys are found through an index, so that large maps stay
// linear.
type fieldSetter struct {
	content []*yaml.Node
	at      map[string]int // a string key's first index in content
}

// set sets field k to v; with dup, a k set before is kept as well, for the parser to report.
func (f *fieldSetter) set(k, v *yaml.Node, dup bool) {
	i, seen := f.at[k.Value]
	if k.Kind != yaml.ScalarNode || !seen || dup {
		if k.Kind == yaml.ScalarNode && !seen {
			f.at[k.Value] = len(f.content)
		}
		f.content = append(f.content, k, v)
		return
	}
	if old := f.content[i+1]; old.Kind == yaml.MappingNode && v.Kind == yaml.MappingNode {
		v = combine(old, v)
	}
	f.content[i+1] = v
}

// combine is map a with the fields of map b set over it, maps within combining in turn.
func combine(a, b *yaml.Node) *yaml.Node {
	f := fieldSetter{at: make(map[string]int, len(a.Content)/2)}
	for i := 0; i+1 < len(a.Content); i += 2 {
		f.set(a.Content[i], a.Content[i+1], true)
	}
	for i := 0; i+1 < len(b.Content); i += 2 {
		f.set(b.Content[i], b.Content[i+1], false)
	}
	c := *a
	c.Content = f.content
	return &c
}
