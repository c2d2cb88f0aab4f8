package consensus

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// A peer serves when its peer API answers; one that listens without
// serving (a member in its own initial check: etcd listens before it
// serves) and one that is not there at all do not.
func TestNotServing(t *testing.T) {
	serving := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/members" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("[]"))
	}))
	defer serving.Close()

	// Accepted by the kernel, never by anyone: the TLS handshake hangs.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Nothing listens here any more.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneURL := "https://" + gone.Addr().String()
	gone.Close()

	client := serving.Client()
	if got := notServing(context.Background(), client, []string{serving.URL}); len(got) != 0 {
		t.Errorf("notServing of a serving peer: %v", got)
	}
	silentURL := "https://" + silent.Addr().String()
	got := notServing(context.Background(), client, []string{silentURL, serving.URL, goneURL})
	if want := []string{silentURL, goneURL}; !slices.Equal(got, want) {
		t.Errorf("notServing = %v, want %v", got, want)
	}
	client.CloseIdleConnections()
}
