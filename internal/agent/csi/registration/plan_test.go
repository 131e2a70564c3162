package registration

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name           string
		found          []Socket
		registered     map[string]Registered
		wantRegister   []Socket
		wantDeregister []string
	}{
		{name: "nothing", wantRegister: nil},
		{name: "new sockets are registered in path order",
			found:        []Socket{{"/r/b.sock", "1"}, {"/r/a.sock", "2"}},
			wantRegister: []Socket{{"/r/a.sock", "2"}, {"/r/b.sock", "1"}}},
		{name: "registered and unchanged: nothing to do",
			found:      []Socket{{"/r/a.sock", "1"}},
			registered: map[string]Registered{"/r/a.sock": {"1", "a"}}},
		{name: "a socket that went away deregisters its driver",
			registered:     map[string]Registered{"/r/a.sock": {"1", "a"}},
			wantDeregister: []string{"/r/a.sock"}},
		{name: "a re-created socket is deregistered and registered again",
			found:          []Socket{{"/r/a.sock", "2"}},
			registered:     map[string]Registered{"/r/a.sock": {"1", "a"}},
			wantRegister:   []Socket{{"/r/a.sock", "2"}},
			wantDeregister: []string{"/r/a.sock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, dereg := Plan(tc.found, tc.registered)
			if d := cmp.Diff(tc.wantRegister, reg, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("register (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantDeregister, dereg, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("deregister (-want +got):\n%s", d)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		info    *regapi.PluginInfo
		want    Plugin
		wantErr bool
	}{
		{name: "CSI driver with its own endpoint",
			info: &regapi.PluginInfo{Type: "CSIPlugin", Name: "d", Endpoint: "/p/d/csi.sock", SupportedVersions: []string{"1.0.0"}},
			want: Plugin{Name: "d", Endpoint: "/p/d/csi.sock", Versions: []string{"1.0.0"}}},
		{name: "empty endpoint means the registration socket",
			info: &regapi.PluginInfo{Type: "CSIPlugin", Name: "d", SupportedVersions: []string{"v1.2.0", "0.3.0"}},
			want: Plugin{Name: "d", Endpoint: "/reg/d.sock", Versions: []string{"v1.2.0"}}},
		{name: "only CSI 0.x", wantErr: true,
			info: &regapi.PluginInfo{Type: "CSIPlugin", Name: "d", SupportedVersions: []string{"0.3.0"}}},
		{name: "no versions", wantErr: true, info: &regapi.PluginInfo{Type: "CSIPlugin", Name: "d"}},
		{name: "device plugin", wantErr: true,
			info: &regapi.PluginInfo{Type: "DevicePlugin", Name: "d", SupportedVersions: []string{"1.0.0"}}},
		{name: "no name", wantErr: true, info: &regapi.PluginInfo{Type: "CSIPlugin", SupportedVersions: []string{"1.0.0"}}},
		{name: "nil", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Validate(tc.info, "/reg/d.sock")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Fatalf("Validate (-want +got):\n%s", d)
			}
		})
	}
}
