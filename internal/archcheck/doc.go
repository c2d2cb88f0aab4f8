// Package archcheck keeps the floors of the code base: the layers that say
// which package may import which (docs/architecture.md draws them). Its
// test reads every package's imports with `go list -json` and fails on an
// arrow that runs upward, on a forbidden arrow, and on a package no floor
// holds. Tests may import what they need (a client's tests run the real
// server): only a package's own code is held to its floor. The floors are declared once, in floors.go; a new package joins
// its folder's floor, a new folder needs a line there.
//
// The package has no code but the declaration: the check is its test, so
// it runs in the README's test command with every other test.
package archcheck
