package runtime

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// Callers decide on an error's class, never on its text: NotFoundf keeps the
// exact text users see and is of class ErrNotFound, wrapped or not.
func TestNotFoundfIsOfItsClassWithItsText(t *testing.T) {
	err := NotFoundf("previous terminated container %q in pod %q not found", "c", "p")
	if got, want := err.Error(), `previous terminated container "c" in pod "p" not found`; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{err, true},
		{fmt.Errorf("wrapped: %w", err), true},
		{fmt.Errorf("container x: %w", ErrNotFound), true},
		{errors.New(`container "c" in pod "p" is not available`), false}, // text is never matched
		{os.ErrNotExist, false},
	} {
		if got := IsNotFound(tc.err); got != tc.want {
			t.Errorf("IsNotFound(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if IsConflict(err) || IsInvalid(err) {
		t.Errorf("%v is of another class too", err)
	}
}
