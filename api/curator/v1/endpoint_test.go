package curatorv1

import "testing"

func TestCuratorEndpointHostPort(t *testing.T) {
	for _, tc := range []struct {
		ep   *CuratorEndpoint
		want string
	}{
		{&CuratorEndpoint{Address: "10.77.0.1", Port: 7835}, "10.77.0.1:7835"},
		{&CuratorEndpoint{Address: "fd00::1", Port: 7835}, "[fd00::1]:7835"},
		{&CuratorEndpoint{Port: 7835}, ""},
		{nil, ""},
	} {
		if got := tc.ep.HostPort(); got != tc.want {
			t.Errorf("%v: HostPort() = %q, want %q", tc.ep, got, tc.want)
		}
	}
}
