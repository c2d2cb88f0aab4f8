package roleserve

import (
	"errors"
	"fmt"
	"io/fs"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/localstorage"
)

// Saved is one message the node keeps on disk for its next boot, and the
// one owner of its file: the roles rolefetch saves and the cluster
// directory clusterdirectory saves are loaded, repaired and saved through
// it, by those workers and by the node agent, which rebuilds them at boot
// (node/agent.go) before the role server runs.
type Saved[T proto.Message] struct {
	// File is where the message is kept.
	File localstorage.File
	// what names the message in logs and errors.
	what string
	// empty returns a new empty message to read into.
	empty func() T
}

// SavedRoles is the node's last known roles, kept in f (localstorage's
// Data.Roles).
func SavedRoles(f localstorage.File) *Saved[*cpb.Roles] {
	return &Saved[*cpb.Roles]{File: f, what: "roles", empty: func() *cpb.Roles { return &cpb.Roles{} }}
}

// SavedDirectory is the cluster directory the node last knew, with the
// cluster CA, kept in f (localstorage's ESP.ClusterDirectory).
func SavedDirectory(f localstorage.File) *Saved[*cpb.ClusterDirectory] {
	return &Saved[*cpb.ClusterDirectory]{File: f, what: "cluster directory", empty: func() *cpb.ClusterDirectory { return &cpb.ClusterDirectory{} }}
}

// Load returns the saved message, or the zero T (nil) when there is none.
// A damaged file is repaired the one way there is: logged and removed, so
// that the caller rebuilds it (from the curator, the consensus data or the
// parameters) and no later reader trips over it; Load then reports none.
// A damaged file that cannot be removed either (a FAT ESP that the kernel
// made read-only after finding its chains broken, as a power cut in the
// middle of a write leaves them) is reported as none all the same, with
// an error in the log: the file is a hint for the next boot, and a node
// that cannot read it still finds its cluster the way a node without one
// does. It never fails.
func (s *Saved[T]) Load(log *zap.Logger) T {
	var none T
	m := s.empty()
	err := s.File.ReadProto(m)
	switch {
	case err == nil:
		return m
	case errors.Is(err, fs.ErrNotExist):
		return none
	}
	log.Warn("unreadable saved "+s.what+": removing the file to rebuild it", zap.String("file", s.File.Path), zap.Error(err))
	if err := s.File.Remove(); err != nil {
		log.Error("could not remove the damaged saved "+s.what+": going on without it", zap.String("file", s.File.Path), zap.Error(err))
	}
	return none
}

// Save writes m atomically. Workers save before they publish: what the
// node acts on is never newer than what it finds after a restart, so a
// restart never goes back to a state older than one it acted on.
func (s *Saved[T]) Save(m T) error {
	if err := s.File.WriteProto(m); err != nil {
		return fmt.Errorf("saving the %s: %w", s.what, err)
	}
	return nil
}
