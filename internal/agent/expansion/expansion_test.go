package expansion

import (
	"errors"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "EMPTY": ""}
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "1"},
		{"x$(A)y$(A)", "x1y1"},
		{"$(EMPTY)z", "z"},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$$(A)", "$(A)"},
		{"$$", "$"},
		{"$$$$", "$$"},
		{"a$b", "a$b"},
		{"tail$", "tail$"},
		{"$(A", "$(A"},
		{"x$(A", "x$(A"},
	} {
		got, err := Expand(tc.in, vars)
		if got != tc.want || err != nil {
			t.Errorf("Expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// References multiply: $(A) x100 per level passes MaxString on the third
// level, and is refused before it is built (the agent once went out of memory
// on such an env).
func TestExpandRefusesWhatGrowsPastTheLimit(t *testing.T) {
	vars := map[string]string{"A": strings.Repeat("a", 1024)}
	b, err := Expand(strings.Repeat("$(A)", 100), vars)
	if err != nil || len(b) != 102400 {
		t.Fatalf("level B: %d bytes, %v", len(b), err)
	}
	vars["B"] = b
	if c, err := Expand(strings.Repeat("$(B)", 100), vars); !errors.Is(err, ErrTooLong) {
		t.Fatalf("level C: %d bytes, %v", len(c), err)
	}
	if _, err := Expand(strings.Repeat("x", MaxString+1), nil); !errors.Is(err, ErrTooLong) {
		t.Errorf("a plain string over MaxString: %v", err)
	}
	if got, err := Expand(strings.Repeat("x", MaxString), nil); err != nil || len(got) != MaxString {
		t.Errorf("exactly MaxString: %d, %v", len(got), err)
	}
}

// A Budget bounds the sum: many variables of 1 MiB each are refused once they
// pass MaxTotal in all.
func TestBudgetBoundsTheTotal(t *testing.T) {
	vars := map[string]string{"M": strings.Repeat("m", MaxString)}
	var b Budget
	for i := 0; i < MaxTotal/MaxString; i++ {
		if _, err := b.Expand("$(M)", vars); err != nil {
			t.Fatalf("expansion %d within the budget: %v", i, err)
		}
	}
	if _, err := b.Expand("$(M)", vars); !errors.Is(err, ErrTooLong) {
		t.Errorf("past the budget: %v", err)
	}
	var c Budget
	if err := c.Charge(MaxTotal); err != nil {
		t.Errorf("charge up to the budget: %v", err)
	}
	if err := c.Charge(1); !errors.Is(err, ErrTooLong) {
		t.Errorf("charge past the budget: %v", err)
	}
}
