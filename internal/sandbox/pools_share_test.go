package sandbox

import "testing"

// TestSplitShare: a pool's count splits evenly over the active nodes, the
// first ones by ID taking the remainder, and adds up to the whole; a node
// that is not active keeps none.
func TestSplitShare(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	for _, c := range []struct {
		n    int
		want [3]int
	}{{0, [3]int{0, 0, 0}}, {1, [3]int{1, 0, 0}}, {2, [3]int{1, 1, 0}}, {3, [3]int{1, 1, 1}}, {10, [3]int{4, 3, 3}}} {
		sum := 0
		for i, node := range nodes {
			got := splitShare(nodes, node)(c.n)
			if got != c.want[i] {
				t.Errorf("%s's share of %d = %d, want %d", node, c.n, got, c.want[i])
			}
			sum += got
		}
		if sum != c.n {
			t.Errorf("shares of %d add up to %d", c.n, sum)
		}
	}
	if got := splitShare(nodes, "cordoned")(10); got != 0 {
		t.Errorf("a node not active keeps %d, want 0", got)
	}
}
