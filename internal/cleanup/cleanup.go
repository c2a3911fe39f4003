// Package cleanup undoes half-done setup in one place: steps are added as
// setup proceeds and, if setup fails, run in reverse. It does nothing else.
package cleanup

// Stack holds undo steps. The zero value is ready to use; it is not safe
// for concurrent use.
type Stack struct {
	steps []func()
}

// Add pushes an undo step.
func (s *Stack) Add(f func()) { s.steps = append(s.steps, f) }

// RunIf runs every step, last added first, when *err is not nil. It is
// meant for a defer in a function with a named error result:
//
//	var undo cleanup.Stack
//	defer undo.RunIf(&err)
func (s *Stack) RunIf(err *error) {
	if *err == nil {
		return
	}
	s.Run()
}

// Run runs every step, last added first, and empties the stack: what was
// set up is given up on.
func (s *Stack) Run() {
	for i := len(s.steps) - 1; i >= 0; i-- {
		s.steps[i]()
	}
	s.steps = nil
}
