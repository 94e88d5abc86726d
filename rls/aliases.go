package rls

import "go.yaml.in/yaml/v3"

// maxExpanded bounds the nodes a file's aliases may expand to. A config of thousands of
// descriptors stays far below it; a file of nested aliases that doubles at each level (a
// "billion laughs") reaches it after a few levels instead of exhausting memory.
const maxExpanded = 1 << 20

// expander replaces every alias in a YAML tree with a copy of the node it names and applies every
// merge key (<<), as envoyproxy/ratelimit's YAML decoding does, so that a config sharing a
// rate_limit through an anchor loads the same in both. The parser then sees plain maps, lists and
// scalars, and its checks (unknown and duplicate fields, kinds, lines) apply to what the aliases
// stand for. A node copied from an anchor keeps the anchor's line, which errors inside it name.
type expander struct {
	p      *parser
	left   int                 // nodes still allowed (see maxExpanded)
	inside map[*yaml.Node]bool // anchors being expanded: an alias to one of them is a cycle
}

func expand(p *parser, n *yaml.Node) (*yaml.Node, error) {
	e := &expander{p: p, left: maxExpanded, inside: map[*yaml.Node]bool{}}
	return e.node(n)
}

func (e *expander) node(n *yaml.Node) (*yaml.Node, error) {
	if e.left--; e.left < 0 {
		return nil, e.p.errf(n, "aliases expand the file to more than %d YAML nodes", maxExpanded)
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
	c := *n
	c.Content = nil
	at := map[string]int{} // a string key's index in c.Content
	given := map[string]bool{}
	set := func(k, v *yaml.Node, own bool) {
		i, seen := at[k.Value]
		if k.Kind != yaml.ScalarNode || !seen || own && given[k.Value] {
			if k.Kind == yaml.ScalarNode && !seen {
				at[k.Value] = len(c.Content)
			}
			c.Content = append(c.Content, k, v)
		} else {
			if old := c.Content[i+1]; old.Kind == yaml.MappingNode && v.Kind == yaml.MappingNode {
				v = combine(old, v)
			}
			c.Content[i+1] = v
		}
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
	return &c, nil
}

// combine is map a with the fields of map b set over it, maps within combining in turn. Keys are
// found through an index, so that combining large maps stays linear.
func combine(a, b *yaml.Node) *yaml.Node {
	c := *a
	c.Content = append([]*yaml.Node(nil), a.Content...)
	at := make(map[string]int, len(c.Content)/2)
	for x := 0; x+1 < len(c.Content); x += 2 {
		if ck := c.Content[x]; ck.Kind == yaml.ScalarNode {
			at[ck.Value] = x // the last of a key given twice, as a scan would find
		}
	}
	for i := 0; i+1 < len(b.Content); i += 2 {
		k, v := b.Content[i], b.Content[i+1]
		j, ok := at[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode || !ok:
			if k.Kind == yaml.ScalarNode {
				at[k.Value] = len(c.Content)
			}
			c.Content = append(c.Content, k, v)
		case c.Content[j+1].Kind == yaml.MappingNode && v.Kind == yaml.MappingNode:
			c.Content[j+1] = combine(c.Content[j+1], v)
		default:
			c.Content[j+1] = v
		}
	}
	return &c
}
