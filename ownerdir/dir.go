package ownerdir

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/localstorage"
)

// The files of a configuration directory.
const (
	// KeyFile holds the owner's private key.
	KeyFile = "key.der"
	// CertificateFile holds the owner certificate.
	CertificateFile = "certificate.der"
	// CAFile holds the pinned cluster CA certificate.
	CAFile = "ca.der"
	// ClusterFile holds the saved curators.
	ClusterFile = "cluster.json"
	proxyFile   = "proxy"
	// NewKeyFile is where owner rotate-key keeps the new owner key while
	// the rotation is under way: written before the curator is asked, so
	// that the new key is on disk whatever happens after the curator has
	// accepted it.
	NewKeyFile = "key.der.new"
)

// Fingerprint returns the SHA-256 of a certificate's DER in hexadecimal:
// what TakeOwnership shows for the cluster CA, so that anyone who can see
// the CA certificate (a node's storage, the launcher's output) can print
// the same string to compare.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// Dir is a configuration directory's files.
type Dir struct {
	// Path is the directory, absolute.
	Path string
	// Key is the owner's private key (PKCS#8, 0600), Cert the owner
	// certificate the cluster issued for it, CA the pinned cluster CA
	// certificate, Cluster the saved curators (a ClusterDirectory in
	// protojson, without the CA).
	Key, Cert, CA, Cluster localstorage.File
	// Proxy, when present, names the proxy the cluster is reached
	// through (SaveProxy).
	Proxy localstorage.File
	// ProxyURL is a proxy given to this run (polisctl --proxy): it
	// replaces the saved one.
	ProxyURL string
	// NewKey is where polisctl owner rotate-key keeps the new owner key
	// while the rotation is under way. Plain like Key: its recovery is
	// take-ownership --owner-key, which reads a bare key.
	NewKey localstorage.File
}

// Open names the files of the configuration directory dir; it reads
// nothing.
func Open(dir string) (*Dir, error) {
	if dir == "" {
		return nil, errors.New("no configuration directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("configuration directory %s: %w", dir, err)
	}
	// Plain: the operator's files are read by other tools too (the JSON
	// by scripts, the DER by openssl or curl), and each carries its own
	// check: the certificate and key must match, the CA is pinned by
	// fingerprint.
	f := func(name string, secret bool) localstorage.File {
		return localstorage.File{Path: filepath.Join(abs, name), Secret: secret, Plain: true}
	}
	return &Dir{
		Path:    abs,
		Key:     f(KeyFile, true),
		Cert:    f(CertificateFile, false),
		CA:      f(CAFile, false),
		Cluster: f(ClusterFile, false),
		Proxy:   f(proxyFile, false),
		NewKey:  f(NewKeyFile, true),
	}, nil
}

// Create makes the directory, private: it holds the owner's key. A
// directory that exists with looser permissions is tightened, so the key is
// never written where others can read it.
func (c *Dir) Create() error {
	if err := os.MkdirAll(c.Path, 0o700); err != nil {
		return fmt.Errorf("creating the configuration directory: %w", err)
	}
	st, err := os.Stat(c.Path)
	if err != nil {
		return fmt.Errorf("configuration directory: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(c.Path, 0o700); err != nil {
			return fmt.Errorf("making the configuration directory %s private: %w", c.Path, err)
		}
	}
	return nil
}

// PinnedCA returns the DER of the pinned CA certificate, or nil if none is
// pinned yet.
func (c *Dir) PinnedCA() ([]byte, error) {
	b, err := c.CA.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// ReadCurators returns the curators saved in the directory.
func (c *Dir) ReadCurators() ([]*cpb.CuratorEndpoint, error) {
	b, err := c.Cluster.Read()
	if err != nil {
		return nil, err
	}
	var d cpb.ClusterDirectory
	if err := protojson.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s is corrupt: %w", c.Cluster.Path, err)
	}
	if len(d.Curators) == 0 {
		return nil, fmt.Errorf("%s lists no curator", c.Cluster.Path)
	}
	return d.Curators, nil
}

// WriteCurators saves curators. The file is JSON so that an operator can
// read it, and fix it when the cluster moved.
func (c *Dir) WriteCurators(eps []*cpb.CuratorEndpoint) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&cpb.ClusterDirectory{Curators: eps})
	if err != nil {
		return fmt.Errorf("encoding %s: %w", c.Cluster.Path, err)
	}
	return c.Cluster.Write(append(b, '\n'))
}

// TakeOwnership exchanges ownerKey for an owner certificate at the cluster
// reachable through curators, and saves everything polisctl needs in dir
// (created 0700 if missing): the key (key.der, PKCS#8, 0600), the
// certificate (certificate.der), the pinned CA certificate (ca.der) and the
// curators (cluster.json: a ClusterDirectory in protojson, without the CA).
//
// Trust on first use, like ssh: the CA is learnt with the unauthenticated
// GetCACertificate, and, when dir pins no CA yet, trust is called with its
// fingerprint (see Fingerprint) and must return true to accept it. A pinned
// CA is not asked about again, and a different one is refused with an error
// that says what changed and how to recover. Everything after that first
// answer is checked against the CA: the curator must present a node
// certificate from it, and the owner certificate must come from it.
//
// Nothing is written unless the owner certificate was issued; each file is
// written atomically.
func TakeOwnership(ctx context.Context, dir string, curators []netip.AddrPort, ownerKey ed25519.PrivateKey, trust func(fingerprint string) bool) error {
	d, err := Open(dir)
	if err != nil {
		return err
	}
	return d.TakeOwnership(ctx, curators, ownerKey, trust)
}

// TakeOwnership is the package's TakeOwnership into d, through d.ProxyURL
// if it is set.
func (d *Dir) TakeOwnership(ctx context.Context, curators []netip.AddrPort, ownerKey ed25519.PrivateKey, trust func(fingerprint string) bool) error {
	if len(curators) == 0 {
		return errors.New("no curator address given: name at least one curator as IP:PORT")
	}
	if len(ownerKey) != ed25519.PrivateKeySize {
		return fmt.Errorf("the owner key is %d bytes, not an ed25519 private key", len(ownerKey))
	}
	pinned, err := d.PinnedCA()
	if err != nil {
		return err
	}
	dialer, err := d.Dialer()
	if err != nil {
		return err
	}
	caDER, err := fetchCA(ctx, curators, dialer)
	if err != nil {
		return err
	}
	fp := Fingerprint(caDER)
	switch {
	case pinned == nil:
		if trust == nil || !trust(fp) {
			return fmt.Errorf("the cluster CA (SHA-256 fingerprint %s) was not trusted; nothing was saved", fp)
		}
	case !bytes.Equal(pinned, caDER):
		return &CAMismatchError{Pinned: Fingerprint(pinned), Presented: fp, File: d.CA.Path, Curators: curators}
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("the CA certificate the curator sent: %w", err)
	}
	v, err := identity.NewVerifier(caCert)
	if err != nil {
		return fmt.Errorf("the CA certificate the curator sent: %w", err)
	}

	kh, err := identity.KeyHolderClientConfig(v, ownerKey)
	if err != nil {
		return err
	}
	var eps []*cpb.CuratorEndpoint
	for _, ap := range curators {
		eps = append(eps, &cpb.CuratorEndpoint{Address: ap.Addr().String(), Port: uint32(ap.Port())})
	}
	conn, err := client.New(client.Config{Endpoints: eps, TLS: kh, Dialer: dialer})
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := cpb.NewAAAServiceClient(conn).TakeOwnership(ctx, &cpb.TakeOwnershipRequest{})
	if err != nil {
		return fmt.Errorf("taking ownership through %s: %w", AddrList(curators), err)
	}
	cert, err := x509.ParseCertificate(resp.OwnerCertificate)
	if err != nil {
		return fmt.Errorf("the owner certificate the curator issued: %w", err)
	}
	// The certificate must be usable as it is saved: from the pinned CA,
	// for this key. Checking here turns a confused curator into an error
	// now rather than a failing handshake on every later command.
	if err := cert.CheckSignatureFrom(caCert); err != nil {
		return fmt.Errorf("the owner certificate the curator issued is not from the cluster CA: %w", err)
	}
	if _, err := identity.TLSCertificate(cert, ownerKey); err != nil {
		return fmt.Errorf("the owner certificate the curator issued: %w", err)
	}
	keyDER, err := identity.MarshalPrivateKey(ownerKey)
	if err != nil {
		return err
	}

	// The curators to remember: those the cluster lists (with their node
	// IDs), then the addresses given that it does not list, which may be
	// all there is while the first curator has not reported itself yet.
	saved := append([]*cpb.CuratorEndpoint(nil), resp.ClusterDirectory.GetCurators()...)
	for _, ep := range eps {
		if !containsEndpoint(saved, ep) {
			saved = append(saved, ep)
		}
	}

	if err := d.Create(); err != nil {
		return err
	}
	// The CA first: once the user has accepted it, it stays pinned even if
	// a later write fails.
	if err := d.CA.Write(caDER); err != nil {
		return err
	}
	if err := d.Key.Write(keyDER); err != nil {
		return err
	}
	if err := d.Cert.Write(cert.Raw); err != nil {
		return err
	}
	return d.WriteCurators(saved)
}

func containsEndpoint(eps []*cpb.CuratorEndpoint, ep *cpb.CuratorEndpoint) bool {
	for _, e := range eps {
		if e.Address == ep.Address && e.Port == ep.Port {
			return true
		}
	}
	return false
}

// CAMismatchError is TakeOwnership's refusal of a CA other than the pinned
// one.
type CAMismatchError struct {
	// Pinned and Presented are the fingerprints of the pinned CA and of the
	// CA the curators presented.
	Pinned, Presented string
	// File is the pinned CA certificate's file.
	File string
	// Curators are the addresses asked.
	Curators []netip.AddrPort
}

func (e *CAMismatchError) Error() string {
	return fmt.Sprintf("the cluster CA has changed: the curators at %s present a CA with SHA-256 fingerprint %s, "+
		"but %s pins %s. Either these are the curators of another cluster (use another --config directory for it), "+
		"the cluster was rebuilt (if you are sure, remove %s and take ownership again), "+
		"or someone is intercepting the connection", AddrList(e.Curators), e.Presented, e.File, e.Pinned, e.File)
}

// fetchCA asks the curators one after the other for the CA certificate
// until one answers. A curator that cannot be reached may be starting (the
// launcher takes ownership as soon as it has started a cluster), so rounds
// repeat until ctx ends; any other failure is final. The answer proves
// nothing (anyone on the path could send any CA); the caller decides whether
// to trust it. As a sanity check the answering curator's own certificate
// must be from that CA, which catches an address that is not a Polis
// curator at all.
func fetchCA(ctx context.Context, curators []netip.AddrPort, dialer func(context.Context, string) (net.Conn, error)) ([]byte, error) {
	last := make([]error, len(curators))
	for {
		for i, ap := range curators {
			der, err := fetchCAFrom(ctx, ap, dialer)
			if err == nil {
				return der, nil
			}
			last[i] = err
			if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded && ctx.Err() == nil {
				return nil, fmt.Errorf("asking %s for the cluster CA: %w", ap, err)
			}
		}
		select {
		case <-ctx.Done():
			var errs []string
			for i, ap := range curators {
				errs = append(errs, fmt.Sprintf("%s: %v", ap, last[i]))
			}
			return nil, fmt.Errorf("no curator answered with the cluster CA certificate (%s); check the addresses and that the cluster is running", strings.Join(errs, "; "))
		case <-time.After(fetchRetryInterval):
		}
	}
}

// fetchRetryInterval spaces out the rounds of fetchCA.
const fetchRetryInterval = 200 * time.Millisecond

// perCuratorTimeout bounds how long fetchCA waits for one curator, so that
// one unreachable address does not use up the whole command's time.
const perCuratorTimeout = 5 * time.Second

func fetchCAFrom(ctx context.Context, ap netip.AddrPort, dialer func(context.Context, string) (net.Conn, error)) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, perCuratorTimeout)
	defer cancel()
	// Nothing is trusted yet: this connection only fetches a certificate
	// that the user then accepts or not.
	tc, served := identity.FirstContactConfig()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}
	if dialer != nil {
		opts = append(opts, grpc.WithContextDialer(dialer))
	}
	conn, err := grpc.NewClient(ap.String(), opts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := cpb.NewCuratorServiceClient(conn).GetCACertificate(ctx, &cpb.GetCACertificateRequest{})
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(resp.CaCertificate)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate it sent: %w", err)
	}
	if sc := served(); sc == nil || sc.CheckSignatureFrom(ca) != nil {
		return nil, errors.New("its own certificate is not from the CA it sent; is it a Polis curator?")
	}
	return resp.CaCertificate, nil
}

// AddrList lists addresses for a message: "a, b, c".
func AddrList(aps []netip.AddrPort) string {
	var s []string
	for _, ap := range aps {
		s = append(s, ap.String())
	}
	return strings.Join(s, ", ")
}

// Dial returns a connection to the cluster's curators as the user saved in
// dir (client.New with identity.UserClientConfig): changes go to the
// leader, reads (cluster info, node watch, the directory) to any curator
// in turn. It renews nothing and does no I/O: the first call finds the
// curators. Errors name the missing file
// and the command that creates it.
// Its calls wait for a curator until their deadline (the launcher waits on
// a cluster that is starting); polisctl's own commands fail fast instead.
func Dial(dir string) (*grpc.ClientConn, error) {
	d, err := Open(dir)
	if err != nil {
		return nil, err
	}
	return d.Dial(false)
}

// Dial is the package's Dial of d, through d.ProxyURL if it is set; with
// failFast, a call fails as soon as no curator could be reached at all
// (client.Config.FailFast), as polisctl's commands want.
func (d *Dir) Dial(failFast bool) (*grpc.ClientConn, error) {
	uc, eps, err := d.ownerTLS()
	if err != nil {
		return nil, err
	}
	dialer, err := d.Dialer()
	if err != nil {
		return nil, err
	}
	return client.New(client.Config{Endpoints: eps, TLS: uc, Dialer: dialer, FailFast: failFast})
}

// ownerTLS reads the owner's credentials saved in d: the TLS
// configuration that presents them to the curator and pins the cluster CA,
// and the saved curators.
func (d *Dir) ownerTLS() (*tls.Config, []*cpb.CuratorEndpoint, error) {
	v, tc, eps, err := d.Credentials()
	if err != nil {
		return nil, nil, err
	}
	uc, err := identity.UserClientConfig(v, tc)
	if err != nil {
		return nil, nil, err
	}
	return uc, eps, nil
}

// Credentials reads the owner's credentials saved in d: a verifier
// pinning the cluster CA, the owner's certificate with its key, and the
// saved curators. Errors name the missing file and the command that
// creates it.
func (d *Dir) Credentials() (*identity.Verifier, tls.Certificate, []*cpb.CuratorEndpoint, error) {
	var none tls.Certificate
	if _, err := os.Stat(d.Path); errors.Is(err, fs.ErrNotExist) {
		return nil, none, nil, fmt.Errorf("the configuration directory %s does not exist: run polisctl take-ownership --curator IP:PORT --owner-key FILE (with --config %s) first", d.Path, d.Path)
	}
	read := func(f localstorage.File) ([]byte, error) {
		b, err := f.Read()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s is missing: %s holds no owner credentials; run polisctl take-ownership (with --config %s) first", f.Path, d.Path, d.Path)
		}
		return b, err
	}
	keyDER, err := read(d.Key)
	if err != nil {
		return nil, none, nil, err
	}
	certDER, err := read(d.Cert)
	if err != nil {
		return nil, none, nil, err
	}
	caDER, err := read(d.CA)
	if err != nil {
		return nil, none, nil, err
	}
	if _, err := read(d.Cluster); err != nil {
		return nil, none, nil, err
	}
	eps, err := d.ReadCurators()
	if err != nil {
		return nil, none, nil, fmt.Errorf("%w; run polisctl take-ownership again to rewrite it", err)
	}
	key, err := identity.ParsePrivateKey(keyDER)
	if err != nil {
		return nil, none, nil, fmt.Errorf("%s: %w", d.Key.Path, err)
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, none, nil, fmt.Errorf("%s: %w; run polisctl take-ownership again", d.Cert.Path, err)
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, none, nil, fmt.Errorf("the owner certificate in %s expired at %s; run polisctl take-ownership again for a new one", d.Cert.Path, cert.NotAfter.Format(time.RFC3339))
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, none, nil, fmt.Errorf("%s: %w", d.CA.Path, err)
	}
	v, err := identity.NewVerifier(caCert)
	if err != nil {
		return nil, none, nil, fmt.Errorf("%s: %w", d.CA.Path, err)
	}
	tc, err := identity.TLSCertificate(cert, key)
	if err != nil {
		return nil, none, nil, fmt.Errorf("%s and %s do not belong together: %w; run polisctl take-ownership again", d.Cert.Path, d.Key.Path, err)
	}
	return v, tc, eps, nil
}
