package consensus

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// etcd's initial corruption check, and a whole cluster starting at once.
//
// Before it serves anything, a restarting member asks every peer for the
// hash of its data at the member's own revision, and refuses to start if
// a peer's differs. The question goes to the peers' peer ports, which
// etcd listens on before this check but serves only after it: when every
// member starts at the same moment (a cold start after a power cut, or
// polis-launch started again), each asks peers that will not answer until
// their own checks are over, and each question runs out etcd's request
// timeout (5 s plus two election timeouts), one peer after the other: 14 s
// before a three-member cluster elected a leader, for a check that then
// passed having compared nothing (a peer that does not answer fails no
// check).
//
// So the member first asks each peer, briefly, whether it serves (its
// peer API's member list, over the peer TLS): the check runs when every
// peer answers, and is skipped, saying so, when one does not. A member
// restarting into a working cluster (a node's reboot, the common case) is
// still checked against every peer; a cluster starting whole is not, and
// relies on the check etcd's leader runs after every compaction
// (CompactHashCheck), which compares the members once they all serve.

// peerServingTimeout bounds the question to each peer; one that serves
// answers in milliseconds.
const peerServingTimeout = time.Second

// initialCheckWanted says whether etcd should run its initial corruption
// check on this start: yes on a member's first start (etcd skips the
// check itself then) and when every peer of the membership stored in
// the member's database serves; no, logged, when one does not.
func initialCheckWanted(ctx context.Context, l layout, id *identity, logger *zap.Logger) bool {
	if _, err := os.Stat(l.dbFile()); errors.Is(err, fs.ErrNotExist) {
		return true
	}
	members, err := readMembers(l.dbFile())
	if err != nil {
		logger.Warn("reading the membership for the initial corruption check; checking all the same", zap.Error(err))
		return true
	}
	var peers []string
	for _, m := range members {
		if slices.Contains(m.PeerURLs, id.PeerURL) || len(m.PeerURLs) == 0 {
			continue
		}
		peers = append(peers, m.PeerURLs[0])
	}
	if len(peers) == 0 {
		return true
	}
	client, err := peerClient(l)
	if err != nil {
		logger.Warn("cannot ask the peers whether they serve; running the initial corruption check all the same", zap.Error(err))
		return true
	}
	defer client.CloseIdleConnections()
	silent := notServing(ctx, client, peers)
	if len(silent) > 0 {
		logger.Info("skipping etcd's initial corruption check: not every peer serves (a cluster starting whole); the leader compares the members after each compaction",
			zap.Strings("not_serving", silent))
		return false
	}
	return true
}

// notServing asks every peer at once for its members and returns those
// that did not answer within peerServingTimeout, in peers' order.
func notServing(ctx context.Context, client *http.Client, peers []string) []string {
	ctx, cancel := context.WithTimeout(ctx, peerServingTimeout)
	defer cancel()
	answered := make([]bool, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			_, err := fetchMembers(ctx, client, p)
			answered[i] = err == nil
		})
	}
	wg.Wait()
	var silent []string
	for i, p := range peers {
		if !answered[i] {
			silent = append(silent, p)
		}
	}
	return silent
}
