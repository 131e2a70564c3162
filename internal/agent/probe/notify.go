package probe

import "context"

// deliver calls OnUpdate for containers whose state changed, from this one
// goroutine and outside the lock. It reads the state at delivery time, so a
// burst of changes reaches the caller as the latest state.
func (m *Manager) deliver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.notify:
		}
		m.mu.Lock()
		ids := m.dirty
		m.dirty = nil
		clear(m.dirtySet)
		updates := make([]Update, 0, len(ids))
		for _, id := range ids {
			if c, ok := m.containers[id]; ok {
				updates = append(updates, c.update())
			}
		}
		m.delivering = true
		m.mu.Unlock()

		for _, u := range updates {
			m.cfg.OnUpdate(u)
		}

		m.mu.Lock()
		m.delivering = false
		m.mu.Unlock()
	}
}
