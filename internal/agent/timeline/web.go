package timeline

import (
	"cmp"
	"embed"
	"net/http"
	"slices"
	"strings"
	"time"
)

//go:embed web
var webFiles embed.FS

// Web serves the timeline page under /timeline-ui/: the node's pods at
// /timeline-ui/, one pod's lanes at /timeline-ui/NAMESPACE/POD. The page
// reads /timeline/ and /timeline/NAMESPACE/POD relative to where it is, so
// that it also works through the API server's node proxy.
func Web() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/timeline-ui/")
		file, ctype := "web/index.html", "text/html; charset=utf-8"
		switch name {
		case "app.js":
			file, ctype = "web/app.js", "text/javascript; charset=utf-8"
		case "style.css":
			file, ctype = "web/style.css", "text/css; charset=utf-8"
		}
		b, err := webFiles.ReadFile(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(b)
	})
}

// Summary is one pod of the node's list.
type Summary struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       string    `json:"uid"`
	Entries   int       `json:"entries"`
	Last      time.Time `json:"last,omitzero"`
}

// Summaries lists the pods with a timeline, by namespace and name.
func (r *Recorder) Summaries() []Summary {
	r.mu.Lock()
	out := make([]Summary, 0, len(r.pods))
	for _, p := range r.pods {
		out = append(out, Summary{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Entries: len(p.Entries), Last: last(p)})
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Summary) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}
