package cleanup

import (
	"errors"
	"slices"
	"testing"
)

func TestRunIf(t *testing.T) {
	for _, failed := range []bool{false, true} {
		var ran []int
		var s Stack
		for i := range 3 {
			s.Add(func() { ran = append(ran, i) })
		}
		var err error
		if failed {
			err = errors.New("setup failed")
		}
		s.RunIf(&err)
		want := []int(nil)
		if failed {
			want = []int{2, 1, 0}
		}
		if !slices.Equal(ran, want) {
			t.Errorf("failed=%v: ran %v, want %v", failed, ran, want)
		}
	}
}

func TestRunEmpties(t *testing.T) {
	var ran []int
	var s Stack
	for i := range 2 {
		s.Add(func() { ran = append(ran, i) })
	}
	s.Run()
	s.Run() // nothing left to run
	if !slices.Equal(ran, []int{1, 0}) {
		t.Errorf("ran %v, want [1 0] once", ran)
	}
}
