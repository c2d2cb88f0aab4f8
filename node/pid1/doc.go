// Package pid1 is what the node agent does when it is a machine's init:
// the duties of PID 1 inside the node image.
package pid1
