package agentup

import (
	"reflect"
	"testing"

	"github.com/podvisor/podvisor/internal/agent/config"
)

func TestWithClusterDNS(t *testing.T) {
	tests := []struct {
		name    string
		conf    []string
		o       ClusterDNSOptions
		want    []string
		wantErr bool
	}{
		{"podvisor serves DNS: pods name kube-dns's address", nil, ClusterDNSOptions{Port: 10053}, []string{"10.43.0.10"}, false},
		{"the configuration's own servers are kept", []string{"192.0.2.53"}, ClusterDNSOptions{Port: 10053}, []string{"192.0.2.53"}, false},
		{"no DNS served: nothing filled in", nil, ClusterDNSOptions{Disable: true}, nil, false},
		{"a bad port is refused", nil, ClusterDNSOptions{Port: 70000}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WithClusterDNS(config.Config{ClusterDNS: tt.conf, ClusterDomain: "cluster.local"}, tt.o)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got.ClusterDNS, tt.want) {
				t.Errorf("clusterDNS = %v, want %v", got.ClusterDNS, tt.want)
			}
		})
	}
}
