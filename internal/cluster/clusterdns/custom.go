package clusterdns

import (
	"os"
	"path/filepath"
	"strings"
)

// CustomConfigMap is the ConfigMap (in kube-system) users extend the DNS
// with, named as in k3s.
const CustomConfigMap = "coredns-custom"

// Merge collects the user's fragments: the ConfigMap's keys ending in
// .server and .override, then the data dir's files (named the same way),
// which win over a ConfigMap key of the same name. Other keys are ignored,
// as k3s's CoreDNS ignores them; they are returned so the caller can say so.
func Merge(configMap, files map[string]string) (c Custom, ignored []string) {
	c = Custom{Overrides: map[string]string{}, Servers: map[string]string{}}
	add := func(prefix string, m map[string]string) {
		for _, name := range sortedKeys(m) {
			switch {
			case strings.HasSuffix(name, ".server"):
				c.Servers[name] = m[name]
			case strings.HasSuffix(name, ".override"):
				c.Overrides[name] = m[name]
			default:
				ignored = append(ignored, prefix+name)
			}
		}
	}
	add("configmap key ", configMap)
	add("file ", files)
	return c, ignored
}

// ReadFragments reads the *.server and *.override files of dir; a missing
// dir is no fragments.
func ReadFragments(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".server") || strings.HasSuffix(n, ".override")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out[n] = string(data)
	}
	return out, nil
}
