package consensus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.uber.org/zap"
)

// A joining member's first start must name every current member of the
// cluster (etcd's initial cluster, checked against the members' own list:
// "member count is unequal"), but its join data list the members as they
// were when it was added: another learner added after it (MaxLearners
// lets two join at once), or a member removed meanwhile, makes them
// stale, and etcd would refuse the start every time. So before its first
// start a joiner asks the peers its join data name for the membership as
// it is now, as etcd itself does when it starts (the peers' /members,
// over the peer TLS the join data set up), and starts with that; if no
// peer answers, it starts with the join data as they are.

// joinPeersTimeout bounds the question to each peer.
const joinPeersTimeout = 5 * time.Second

// currentInitialCluster returns the initial cluster of a joining member's
// first start (etcd's name=URL list): id's, brought up to date with the
// membership the peers report. It keeps id's if no peer answers or the
// answer does not list this member.
func currentInitialCluster(ctx context.Context, l layout, id *identity, logger *zap.Logger) string {
	if id.InitialClusterState != "existing" || id.MemberID != "" {
		// Bootstrapped, or started before: etcd ignores the flag now.
		return id.InitialCluster
	}
	known := map[string]string{} // peer URL → name, from the join data
	var peers []string
	for entry := range strings.SplitSeq(id.InitialCluster, ",") {
		name, url, ok := strings.Cut(entry, "=")
		if !ok {
			continue
		}
		known[url] = name
		if url != id.PeerURL {
			peers = append(peers, url)
		}
	}
	client, err := peerClient(l)
	if err != nil {
		logger.Warn("cannot ask the peers for the current membership; joining with the join data's", zap.Error(err))
		return id.InitialCluster
	}
	defer client.CloseIdleConnections()
	for _, p := range peers {
		members, err := fetchMembers(ctx, client, p)
		if err != nil {
			logger.Info("asking a peer for the current membership", zap.String("peer", p), zap.Error(err))
			continue
		}
		cluster, ok := initialClusterOf(members, id, known)
		if !ok {
			logger.Warn("a peer's membership does not list this member; joining with the join data's", zap.String("peer", p))
			return id.InitialCluster
		}
		if cluster != sortedCluster(id.InitialCluster) {
			logger.Info("the membership changed since the join data were made; joining with the current one", zap.String("join_data", id.InitialCluster), zap.String("current", cluster))
		}
		return cluster
	}
	logger.Warn("no peer answered with the current membership; joining with the join data's", zap.Strings("peers", peers))
	return id.InitialCluster
}

// sortedCluster is an initial cluster list in initialClusterOf's order.
func sortedCluster(c string) string {
	entries := strings.Split(c, ",")
	slices.Sort(entries)
	return strings.Join(entries, ",")
}

// initialClusterOf is the name=URL list of members, sorted: this member
// under its own name, the others under their names, or else the name the
// join data gave their URL, or else their ID (a member added after the
// join data were made that has not started yet has no name; etcd matches
// members by URL, the names only need to be distinct). ok is false if
// this member is not among them.
func initialClusterOf(members []*membership.Member, id *identity, known map[string]string) (string, bool) {
	var out []string
	self := false
	for _, m := range members {
		if len(m.PeerURLs) == 0 {
			continue
		}
		url := m.PeerURLs[0]
		name := m.Name
		switch {
		case url == id.PeerURL:
			name, self = id.Name, true
		case name != "":
		case known[url] != "":
			name = known[url]
		default:
			name = memberIDString(uint64(m.ID))
		}
		for _, u := range m.PeerURLs {
			out = append(out, name+"="+u)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ","), self
}

// peerClient is an HTTP client that speaks to the peers as this member:
// its peer certificate, and the cluster's peer CA as the only root.
func peerClient(l layout) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(l.peerCertFile(), l.peerKeyFile())
	if err != nil {
		return nil, fmt.Errorf("loading the peer certificate: %w", err)
	}
	caPEM, err := os.ReadFile(l.caFile())
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the peer CA file holds no certificate")
	}
	return &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			RootCAs:      roots,
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// fetchMembers asks the peer at url for the cluster's members (etcd's peer
// API, as etcd asks when it joins).
func fetchMembers(ctx context.Context, client *http.Client, url string) ([]*membership.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, joinPeersTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/members", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var members []*membership.Member
	if err := json.Unmarshal(b, &members); err != nil {
		return nil, fmt.Errorf("parsing the members: %w", err)
	}
	return members, nil
}
