package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podvisor/podvisor/internal/host/durable"
)

// PullRecords keeps, on disk, what the credential check needs across
// agent restarts, as the kubelet's image_manager directory:
//   - pulling/: an intent per image being pulled, written before the pull
//     and removed after it (success or failure), so that an image whose
//     pull a crash interrupted still counts as pulled by the agent (and so
//     is checked) rather than preloaded;
//   - pulled/: a PulledRecord per image ID.
//
// File names are a SHA-256 of the image or ID (names have ':' and '/').
// Safe for concurrent use.
type PullRecords struct {
	dir string

	mu       sync.Mutex
	inflight map[string]int // image -> pulls under way in this process
}

// OpenPullRecords uses (and creates) dir.
func OpenPullRecords(dir string) (*PullRecords, error) {
	for _, sub := range []string{"pulling", "pulled"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("image pull records: %w", err)
		}
	}
	return &PullRecords{dir: dir, inflight: map[string]int{}}, nil
}

func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

func (r *PullRecords) intentPath(image string) string {
	return filepath.Join(r.dir, "pulling", fileName(image))
}

func (r *PullRecords) pulledPath(imageID string) string {
	return filepath.Join(r.dir, "pulled", fileName(imageID))
}

type pullIntent struct {
	Image string `json:"image"`
}

// startPull records the intent to pull image.
func (r *PullRecords) startPull(image string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(pullIntent{Image: image})
	if err := durable.WriteFile(r.intentPath(image), b); err != nil {
		return fmt.Errorf("recording the pull of %s: %w", image, err)
	}
	r.inflight[image]++
	return nil
}

// endPull forgets a pull of image once no other is under way; a
// successful one has written its record first.
func (r *PullRecords) endPull(image string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight[image] > 1 {
		r.inflight[image]--
		return nil
	}
	delete(r.inflight, image)
	if err := os.Remove(r.intentPath(image)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// pulling says whether a pull of image is under way or was interrupted.
func (r *PullRecords) pulling(image string) bool {
	r.mu.Lock()
	n := r.inflight[image]
	r.mu.Unlock()
	if n > 0 {
		return true
	}
	_, err := os.Stat(r.intentPath(image))
	return err == nil
}

// pulled reads the record of an image ID; nil if there is none. A record
// that cannot be read is an error: the caller then checks credentials.
func (r *PullRecords) pulled(imageID string) (*PulledRecord, error) {
	var rec PulledRecord
	err := durable.ReadJSON(r.pulledPath(imageID), &rec)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	case rec.ImageID != imageID:
		return nil, fmt.Errorf("image pull record %s is for %q, not %q", r.pulledPath(imageID), rec.ImageID, imageID)
	}
	return &rec, nil
}

// record merges creds for repository into imageID's record. nil creds
// still create the record (the image counts as pulled by the agent, and
// every pod's credentials are checked), as after an interrupted pull.
func (r *PullRecords) record(imageID, repository string, creds *PullCredentials, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, err := r.pulled(imageID)
	if err != nil || cur == nil {
		// An unreadable record is replaced: what it said is lost, which
		// only makes later checks stricter.
		fresh, _ := mergeCredentials(PulledRecord{ImageID: imageID, Updated: now}, repository, creds, now)
		return r.write(fresh)
	}
	next, changed := mergeCredentials(*cur, repository, creds, now)
	if !changed {
		return nil
	}
	return r.write(next)
}

func (r *PullRecords) write(rec PulledRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return durable.WriteFile(r.pulledPath(rec.ImageID), b)
}

// intents lists the images whose pull was under way when an earlier agent
// stopped.
func (r *PullRecords) intents() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(r.dir, "pulling"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		var in pullIntent
		if err := durable.ReadJSON(filepath.Join(r.dir, "pulling", e.Name()), &in); err == nil && in.Image != "" {
			out = append(out, in.Image)
		}
	}
	return out, nil
}

// prune removes the records of images not in present (by ID).
func (r *PullRecords) prune(present map[string]bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := filepath.Join(r.dir, "pulled")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		var rec PulledRecord
		if err := durable.ReadJSON(filepath.Join(dir, e.Name()), &rec); err == nil && present[rec.ImageID] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
