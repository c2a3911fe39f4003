package control

// PeekFree is peekFree, for the tests of package control_test.
const PeekFree = peekFree
