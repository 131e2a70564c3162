package podsecurity

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/runtime"
)

func TestContainer(t *testing.T) {
	node := Node{SeccompProfileRoot: "/data/agent/seccomp"}
	for _, tc := range []struct {
		name string
		pod  *v1.PodSecurityContext
		c    *v1.SecurityContext
		node Node
		want runtime.Security
		err  string
	}{
		{name: "nothing set", want: runtime.Security{}},
		{name: "seccompDefault", node: Node{SeccompDefault: true}, want: runtime.Security{Seccomp: runtime.SecurityProfile{Type: "RuntimeDefault"}}},
		{name: "the container's own", c: &v1.SecurityContext{Privileged: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false), ProcMount: ptr.To(v1.UnmaskedProcMount),
			Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}}},
			want: runtime.Security{Privileged: true, ReadOnlyRootfs: true, NoNewPrivs: true, UnmaskedProc: true,
				CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}}},
		{name: "allowPrivilegeEscalation true", c: &v1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true)}, want: runtime.Security{}},
		{name: "the pod's seccomp", pod: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			want: runtime.Security{Seccomp: runtime.SecurityProfile{Type: "RuntimeDefault"}}},
		{name: "the container's seccomp wins", pod: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			c:    &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("prof/audit.json")}},
			want: runtime.Security{Seccomp: runtime.SecurityProfile{Type: "Localhost", Path: "/data/agent/seccomp/prof/audit.json"}}},
		{name: "Unconfined over seccompDefault", node: Node{SeccompDefault: true},
			c: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}}, want: runtime.Security{}},
		{name: "Localhost without a profile", c: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost}},
			err: "localhostProfile must be set if seccompProfile type is Localhost."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := node
			n.SeccompDefault = tc.node.SeccompDefault
			pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: tc.pod, Containers: []v1.Container{{Name: "c", SecurityContext: tc.c}}}}
			got, err := Container(pod, &pod.Spec.Containers[0], n)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", tc.want) {
				t.Fatalf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

func TestSandbox(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{HostIPC: true, ShareProcessNamespace: ptr.To(true),
		SecurityContext: &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}},
			SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
		InitContainers: []v1.Container{{Name: "i", SecurityContext: &v1.SecurityContext{Privileged: ptr.To(true)}}},
		Containers:     []v1.Container{{Name: "c"}}}}
	var spec runtime.SandboxSpec
	if err := Sandbox(pod, Node{}, &spec); err != nil {
		t.Fatal(err)
	}
	if !spec.HostIPC || spec.HostPID || !spec.SharePID || !spec.Privileged || spec.Seccomp.Type != "RuntimeDefault" ||
		spec.Sysctls["kernel.shm_rmid_forced"] != "1" {
		t.Fatalf("sandbox %+v", spec)
	}
}

func TestSysctlAdmission(t *testing.T) {
	a, err := NewAllowlist([]string{"net.core.somaxconn", "kernel.msg*"})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(hostNet, hostIPC bool, names ...string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{HostNetwork: hostNet, HostIPC: hostIPC,
			SecurityContext: &v1.PodSecurityContext{}}}
		for _, n := range names {
			p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: n, Value: "1"})
		}
		return p
	}
	for _, tc := range []struct {
		pod  *v1.Pod
		want string // "" admitted
	}{
		{pod(false, false, "net.ipv4.ip_unprivileged_port_start", "kernel.shm_rmid_forced"), ""},
		{pod(false, false, "net/ipv4/tcp_syncookies"), ""},
		{pod(false, false, "net.core.somaxconn", "kernel.msgmax"), ""},
		{pod(false, false, "vm.swappiness"), `forbidden sysctl: "vm.swappiness" not allowlisted`},
		{pod(true, false, "net.ipv4.tcp_syncookies"), `forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host Net enabled`},
		{pod(false, true, "kernel.shm_rmid_forced"), `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled`},
	} {
		msg, ok := a.Admit(tc.pod)
		if ok != (tc.want == "") || msg != tc.want {
			t.Errorf("%v: got %q %v, want %q", tc.pod.Spec.SecurityContext.Sysctls, msg, ok, tc.want)
		}
	}
	if _, err := NewAllowlist([]string{"vm.swappiness"}); err == nil || !strings.Contains(err.Error(), "not known to be namespaced") {
		t.Errorf("a sysctl of no namespace allowed: %v", err)
	}
}

func TestAppArmorAdmission(t *testing.T) {
	withProfile := func(p *v1.AppArmorProfile) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", SecurityContext: &v1.SecurityContext{AppArmorProfile: p}}}}}
	}
	runtimeDefault := withProfile(&v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault})
	if msg, ok := AdmitAppArmor(runtimeDefault, false); ok || msg != "Cannot enforce AppArmor: AppArmor is not enabled on the host" {
		t.Errorf("RuntimeDefault without AppArmor: %q %v", msg, ok)
	}
	if _, ok := AdmitAppArmor(runtimeDefault, true); !ok {
		t.Error("RuntimeDefault with AppArmor refused")
	}
	if _, ok := AdmitAppArmor(withProfile(&v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}), false); !ok {
		t.Error("Unconfined without AppArmor refused")
	}
	annotated := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "localhost/prof"}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	if _, ok := AdmitAppArmor(annotated, false); ok {
		t.Error("an annotated profile without AppArmor admitted")
	}
	if got := appArmor(annotated, &annotated.Spec.Containers[0]); got != (runtime.SecurityProfile{Type: "Localhost", Path: "prof"}) {
		t.Errorf("annotated profile %+v", got)
	}
	running := withProfile(&v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault})
	running.Status.Phase = v1.PodRunning
	if _, ok := AdmitAppArmor(running, false); !ok {
		t.Error("a running pod re-checked")
	}
}

func TestUnenforceable(t *testing.T) {
	for _, tc := range []struct {
		pod  *v1.PodSecurityContext
		c    *v1.SecurityContext
		want string
	}{
		{want: ""},
		{c: &v1.SecurityContext{Privileged: ptr.To(true), Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}}}, want: ""},
		{c: &v1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true), ProcMount: ptr.To(v1.DefaultProcMount)}, want: ""},
		{c: &v1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}, want: "securityContext.readOnlyRootFilesystem"},
		{c: &v1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}, want: "securityContext.allowPrivilegeEscalation: false"},
		{c: &v1.SecurityContext{Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}}, want: "securityContext.capabilities.drop"},
		{pod: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}}, want: "securityContext.seccompProfile (of the pod)"},
		{pod: &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
			c: &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}}, want: ""},
		{pod: &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}}}, want: "securityContext.sysctls (of the pod)"},
		{pod: &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}, want: "an AppArmor profile"},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: tc.pod, Containers: []v1.Container{{Name: "c", SecurityContext: tc.c}}}}
		if got := Unenforceable(pod, &pod.Spec.Containers[0]); got != tc.want {
			t.Errorf("pod %+v container %+v: %q, want %q", tc.pod, tc.c, got, tc.want)
		}
	}
}
