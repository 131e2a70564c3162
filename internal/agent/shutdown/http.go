package shutdown

import (
	"encoding/json"
	"errors"
	"net/http"
)

// Handler serves the agent API's /shutdown, which `podvisor node shutdown`
// and `podvisor node cancel` call:
//
//	GET    /shutdown  the Status
//	POST   /shutdown  start a shutdown (as PrepareForShutdown(true)); 202
//	DELETE /shutdown  cancel it (as PrepareForShutdown(false))
//
// Every answer is the Status as JSON; a shutdown without any grace period
// configured is refused with 409 and the reason.
func (m *Manager) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost:
			if _, err := m.Shutdown("command"); err != nil {
				if errors.Is(err, ErrNotConfigured) {
					http.Error(w, err.Error(), http.StatusConflict)
					return
				}
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			code = http.StatusAccepted
		case http.MethodDelete:
			m.Cancel("command")
		default:
			w.Header().Set("Allow", "GET, POST, DELETE")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(m.Status())
	})
}
