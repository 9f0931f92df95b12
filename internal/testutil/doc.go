// Package testutil holds small helpers that tests of several packages
// share. It is imported by tests only and must not grow test doubles of
// real components: tests run those for real.
package testutil
