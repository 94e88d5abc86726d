// Package atomic holds slidelimit's packed cells: each policy's per-key state encoded in one
// 64-bit word, or in a 16-byte pair for configurations too large for one word, and the
// compare-and-swap loops that update them.
//
// It is a building block of package engine, exported for the engine's own benchmarks and for
// readers of its design (docs/design.md); a program that limits rates uses engine, and nothing
// here is needed for that.
//
// A cell is addressed by a pointer to its first word. Bits 63 and 62 of the first word are
// flags owned by the table, not by the policy: Dead marks a cell whose key was evicted (the slot
// stays reserved for that key until the table is rebuilt), Moved marks a cell copied into a newer
// table. A cell with either flag set is not live; an update that finds one returns its status
// instead of writing, and the caller looks the key up again. That is how an admitted request is
// always counted: it is never written into an orphaned cell.
//
// Every function here is safe for concurrent use on the same cell. Two-word cells must be 16-byte
// aligned; on amd64 they are updated with CMPXCHG16B (lock-free), elsewhere under a striped lock.
//
// The package name shadows sync/atomic; files that need both import sync/atomic as satomic.
package atomic
