package scheduler

import "fmt"

// Layer is one layer of a lineage, or one a node holds: a template's base
// layer or a snapshot's layer, by ID, with its size in bytes (what a node
// that lacks it downloads).
type Layer struct {
	ID   string
	Size int64
}

// The held-layers summary. Each layer any node holds gets a small integer
// ref (layer IDs are interned once, however many nodes hold the layer), and
// for each cluster in which it is held, the list of its holders there. A
// node keeps a map from the refs it holds to its position in that list, so
// that adding or dropping one layer of one node is a map write and a
// swap-remove, whatever the fleet's size. A layer nobody holds any more
// leaves the index and its ref is reused. The memory is one map entry and
// one list entry (4 bytes) per (node, layer) held, plus one ID per layer.
type layerEntry struct {
	id      string
	size    int64
	holders []clusterHolders // one per cluster holding it
}

type clusterHolders struct {
	cluster int32
	nodes   []int32 // slots
}

// AddLayer records that a node holds a layer (it materialized it, or took
// the snapshot). Adding a layer it holds updates nothing but the size.
func (v *View) AddLayer(id string, l Layer) error {
	slot, ok := v.byID[id]
	if !ok {
		return fmt.Errorf("%w %s", ErrUnknownNode, id)
	}
	if l.ID == "" || l.Size < 0 {
		return fmt.Errorf("scheduler: node %s: layer %q of size %d", id, l.ID, l.Size)
	}
	ref, ok := v.byLayer[l.ID]
	if !ok {
		ref = v.newRef(l)
	}
	if v.layers[ref].size != l.Size {
		v.resize(ref, l.Size)
	}
	if _, held := v.nodes[slot].held[ref]; !held {
		v.hold(slot, ref)
	}
	return nil
}

// RemoveLayer records that a node no longer holds a layer (it evicted
// it). It reports whether the node held it.
func (v *View) RemoveLayer(id, layerID string) bool {
	slot, ok := v.byID[id]
	if !ok {
		return false
	}
	ref, ok := v.byLayer[layerID]
	if !ok {
		return false
	}
	if _, held := v.nodes[slot].held[ref]; !held {
		return false
	}
	v.unhold(slot, ref)
	return true
}

// SetLayers replaces what a node holds by a full report of it.
func (v *View) SetLayers(id string, layers []Layer) error {
	slot, ok := v.byID[id]
	if !ok {
		return fmt.Errorf("%w %s", ErrUnknownNode, id)
	}
	for _, l := range layers {
		if l.ID == "" || l.Size < 0 {
			return fmt.Errorf("scheduler: node %s: layer %q of size %d", id, l.ID, l.Size)
		}
	}
	keep := make(map[string]bool, len(layers))
	for _, l := range layers {
		keep[l.ID] = true
	}
	var drop []int32
	for ref := range v.nodes[slot].held {
		if !keep[v.layers[ref].id] {
			drop = append(drop, ref)
		}
	}
	for _, ref := range drop {
		v.unhold(slot, ref)
	}
	for _, l := range layers {
		if err := v.AddLayer(id, l); err != nil {
			return err
		}
	}
	return nil
}

// Holds reports whether a node holds a layer.
func (v *View) Holds(id, layerID string) bool {
	slot, ok := v.byID[id]
	if !ok {
		return false
	}
	ref, ok := v.byLayer[layerID]
	if !ok {
		return false
	}
	_, held := v.nodes[slot].held[ref]
	return held
}

// HeldBytes is the sum of the sizes of the layers a node holds.
func (v *View) HeldBytes(id string) int64 {
	slot, ok := v.byID[id]
	if !ok {
		return 0
	}
	return v.nodes[slot].heldBytes
}

func (v *View) newRef(l Layer) int32 {
	var ref int32
	if k := len(v.freeRef); k > 0 {
		ref = v.freeRef[k-1]
		v.freeRef = v.freeRef[:k-1]
	} else {
		v.layers = append(v.layers, layerEntry{})
		ref = int32(len(v.layers) - 1)
	}
	v.layers[ref] = layerEntry{id: l.ID, size: l.Size}
	v.byLayer[l.ID] = ref
	return ref
}

// resize changes a layer's size, and the held bytes of its holders.
func (v *View) resize(ref int32, size int64) {
	e := &v.layers[ref]
	for _, ch := range e.holders {
		for _, s := range ch.nodes {
			v.nodes[s].heldBytes += size - e.size
		}
	}
	e.size = size
}

// holdersIn returns the index in e.holders of cluster ci's list, or -1.
func (e *layerEntry) holdersIn(ci int32) int {
	for i := range e.holders {
		if e.holders[i].cluster == ci {
			return i
		}
	}
	return -1
}

func (v *View) hold(slot, ref int32) {
	n := &v.nodes[slot]
	e := &v.layers[ref]
	i := e.holdersIn(n.cluster)
	if i < 0 {
		e.holders = append(e.holders, clusterHolders{cluster: n.cluster})
		i = len(e.holders) - 1
	}
	ch := &e.holders[i]
	n.held[ref] = int32(len(ch.nodes))
	ch.nodes = append(ch.nodes, slot)
	n.heldBytes += e.size
}

// unhold drops a layer from a node, and from the index once nobody holds
// it.
func (v *View) unhold(slot, ref int32) {
	v.unlist(slot, ref)
	if e := &v.layers[ref]; len(e.holders) == 0 {
		delete(v.byLayer, e.id)
		v.layers[ref] = layerEntry{}
		v.freeRef = append(v.freeRef, ref)
	}
}

// unlist drops a layer from a node, keeping its entry in the index.
func (v *View) unlist(slot, ref int32) {
	n := &v.nodes[slot]
	e := &v.layers[ref]
	i := e.holdersIn(n.cluster)
	ch := &e.holders[i]
	pos := n.held[ref]
	last := ch.nodes[len(ch.nodes)-1]
	ch.nodes[pos] = last
	v.nodes[last].held[ref] = pos
	ch.nodes = ch.nodes[:len(ch.nodes)-1]
	delete(n.held, ref)
	n.heldBytes -= e.size
	if len(ch.nodes) == 0 {
		e.holders[i] = e.holders[len(e.holders)-1]
		e.holders = e.holders[:len(e.holders)-1]
	}
}
