package nodeservice

import (
	"fmt"
	"strings"

	"github.com/polis-os/polis/kube/pki"
)

// A node service reaches the apiserver as the kubelet does, through the
// kubelet's local proxy with a client certificate of its own; the two
// functions below are what every service's configuration does with that.

// CheckAPIClient returns what is wrong with how a node service reaches
// the apiserver: server must be an https URL, and the Kubernetes CA and
// the service's client certificate and key (PEM) must all be given.
func CheckAPIClient(server string, ca, cert, key []byte) []error {
	var errs []error
	if !strings.HasPrefix(server, "https://") {
		errs = append(errs, fmt.Errorf("config field Server %q is not an https URL", server))
	}
	for name, b := range map[string][]byte{"CA": ca, "Cert": cert, "Key": key} {
		if len(b) == 0 {
			errs = append(errs, fmt.Errorf("credential %s is missing", name))
		}
	}
	return errs
}

// KubeconfigFile is the service's kubeconfig at path, a secret (0600):
// the server and CA, and user's client certificate and key.
func KubeconfigFile(path, server, user string, ca, cert, key []byte) (File, error) {
	kubeconfig, err := pki.Kubeconfig(server, ca, user, pki.Pair{Cert: cert, Key: key})
	if err != nil {
		return File{}, err
	}
	return File{Path: path, Data: kubeconfig, Secret: true}, nil
}
