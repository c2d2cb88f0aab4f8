// Package devmapper creates and removes device-mapper devices through the
// kernel's ioctls on /dev/mapper/control, from Go, with no dmsetup or
// cryptsetup binary: the node image has neither, and PID 1 needs exactly
// one kind of table, a dm-crypt mapping over the data disk.
//
// # The model
//
// A mapped device is made in three calls, as dmsetup does: DM_DEV_CREATE
// names an empty device, DM_TABLE_LOAD gives it an inactive table, and
// DM_DEV_SUSPEND without the suspend flag makes that table live. If any
// step fails, the half-made device is removed again, so a failed Create
// leaves nothing behind. Remove is DM_DEV_REMOVE.
//
// The key of a crypt table travels in the table's text (as hex), so the
// load is flagged DM_SECURE_DATA_FLAG, which makes the kernel wipe its
// copies of the buffers; this package wipes its own.
//
// There is no udev in the node image: Create makes the device node itself
// (/dev/mapper/NAME, from the device number the kernel returns).
//
// # What it does not do
//
// It knows nothing about keys, headers or file systems: the caller
// (node/diskseal, node/pid1) decides what is mapped and with what key.
// It does not list, rename or resize devices.
package devmapper
