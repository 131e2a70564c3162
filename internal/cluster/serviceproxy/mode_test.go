package serviceproxy

import (
	"strings"
	"testing"
)

func TestChooseMode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		host    Host
		want    Mode
		because string // part of the reason
		err     bool
	}{
		{"this machine", Host{"6.18.44-fc-v657", "nftables v1.0.6 (Lester Gooch #5)", true}, NFTables, "kernel 6.18.44 and nft 1.0.6", false},
		{"exact minimums", Host{"5.13.0", "nftables v1.0.1 (Fearless Fosdick #3)", false}, NFTables, "support it", false},
		{"old kernel", Host{"5.10.0-28-amd64", "nftables v1.0.6", true}, IPTables, "kernel 5.10.0 is older than 5.13.0", false},
		{"old nft", Host{"6.1.0", "nftables v0.9.8 (E.D.S.)", true}, IPTables, "nft 0.9.8 is older than 1.0.1", false},
		{"no nft", Host{"6.1.0", "", true}, IPTables, "no nft command", false},
		{"garbled kernel", Host{"unknown", "nftables v1.0.6", true}, IPTables, "not a version", false},
		{"two-part kernel", Host{"6.2-rc1", "nftables v1.0.6", true}, NFTables, "kernel 6.2.0", false},
		{"neither", Host{"5.4.0", "", false}, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := ChooseMode(tc.host)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if got != tc.want || !strings.Contains(why, tc.because) {
				t.Errorf("ChooseMode(%+v) = %q, %q; want %q because of %q", tc.host, got, why, tc.want, tc.because)
			}
		})
	}
}
