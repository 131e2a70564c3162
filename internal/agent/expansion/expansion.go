// Package expansion expands $(VAR) references in commands, args and env
// values as the kubelet does.
package expansion

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on what expansion may produce. References multiply: a 4-byte
// $(A) stands for all of A, and a variable may be built from earlier ones,
// so a spec within the API's size limit can ask for gigabytes (an env of
// $(A) x100, then $(B) x100, … took the agent out of memory). Nothing that
// large could be passed to a process anyway: Linux refuses a single argument
// or variable over 128 KiB and all of them over the stack limit / 4.
const (
	MaxString = 1 << 20  // one expanded string
	MaxTotal  = 16 << 20 // everything one Budget expands
)

// ErrTooLong is the error of an expansion past a limit.
var ErrTooLong = errors.New("expands to more than the agent allows")

// Budget bounds the total size of a series of expansions (one container's
// env and command, one probe's command). The zero value allows MaxTotal.
type Budget struct{ used int }

// Expand is Expand within the budget; it charges the budget with the result.
func (b *Budget) Expand(s string, vars map[string]string) (string, error) {
	limit := min(MaxString, MaxTotal-b.used)
	out, err := expand(s, vars, limit)
	if err != nil {
		if limit < MaxString {
			return "", fmt.Errorf("%w: more than %d MiB in all", ErrTooLong, MaxTotal>>20)
		}
		return "", err
	}
	b.used += len(out)
	return out, nil
}

// Charge counts n bytes of unexpanded values against the budget.
func (b *Budget) Charge(n int) error {
	b.used += n
	if b.used > MaxTotal {
		return fmt.Errorf("%w: more than %d MiB in all", ErrTooLong, MaxTotal>>20)
	}
	return nil
}

// Expand replaces $(VAR) with its value when VAR is defined, turns $$ into $,
// and leaves anything else (an undefined $(VAR), a lone $) as written. A
// result longer than MaxString is an error (ErrTooLong), found before it is
// built.
func Expand(s string, vars map[string]string) (string, error) {
	return expand(s, vars, MaxString)
}

func expand(s string, vars map[string]string, limit int) (string, error) {
	if !strings.Contains(s, "$") {
		if len(s) > limit {
			return "", tooLong(limit)
		}
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if b.Len() > limit {
			return "", tooLong(limit)
		}
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				i = len(s)
				continue
			}
			name := s[i+2 : i+2+end]
			v, ok := vars[name]
			if !ok {
				v = s[i : i+3+end]
			}
			if b.Len()+len(v) > limit {
				return "", tooLong(limit)
			}
			b.WriteString(v)
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	if b.Len() > limit {
		return "", tooLong(limit)
	}
	return b.String(), nil
}

func tooLong(limit int) error {
	return fmt.Errorf("%w: more than %d bytes", ErrTooLong, limit)
}
