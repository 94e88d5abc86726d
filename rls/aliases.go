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

// mapping copies a map with its merge keys applied. A key given in the map itself wins over a
// merged one, and an earlier map in a merge list over a later one, as YAML's merge key type
// defines. Keys given twice in the map itself are both kept, for the parser to report.
func (e *expander) mapping(n *yaml.Node) (*yaml.Node, error) {
	c := *n
	c.Content = nil
	var merges []*yaml.Node
	own := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		v, err := e.node(v)
		if err != nil {
			return nil, err
		}
		if k.Kind == yaml.ScalarNode {
			own[k.Value] = true
		}
		c.Content = append(c.Content, k, v)
	}
	for _, m := range merges {
		m, err := e.node(m)
		if err != nil {
			return nil, err
		}
		maps := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			maps = m.Content
		}
		for _, mm := range maps {
			if mm.Kind != yaml.MappingNode {
				return nil, e.p.errf(mm, "the merge key << is given %s, want a map or a list of maps", kindName(mm))
			}
			for i := 0; i+1 < len(mm.Content); i += 2 {
				k := mm.Content[i]
				if k.Kind == yaml.ScalarNode {
					if own[k.Value] {
						continue
					}
					own[k.Value] = true
				}
				c.Content = append(c.Content, k, mm.Content[i+1])
			}
		}
	}
	return &c, nil
}
