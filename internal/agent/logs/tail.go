package logs

import (
	"bytes"
	"errors"
	"io"
)

// tailOffset returns the offset in r[0:size] where the last n logical lines
// of stream ("" for both) begin, reading the file backwards so that a short
// tail of a large log costs little. A logical line is a run of P entries
// ended by an F entry; a run of P entries at the end counts as a line too.
// Malformed lines are not counted (the reader skips them). With both streams
// selected, partial runs of stdout and stderr interleaved in the file are
// counted as if they were one stream: the count may be off by one there.
func tailOffset(r io.ReaderAt, size, n int64, stream string) (int64, error) {
	if n <= 0 {
		return size, nil
	}
	var found int64
	pending := false // entries seen after this point belong to a line not yet counted
	start := int64(0)
	err := scanBackward(r, size, func(line []byte, end int64) bool {
		e, ok := parseEntry(line)
		if !ok || (stream != "" && e.stream != stream) {
			return true
		}
		if !e.partial && pending {
			// This F entry ends the line before the pending one.
			found++
			if found == n {
				start = end
				return false
			}
		}
		pending = true
		return true
	})
	return start, err
}

const scanChunk = 32 << 10

// scanBackward calls fn for each line of r[0:size], last first, without its
// '\n', together with the offset just past it (past its '\n' when it has
// one). It stops when fn returns false. line is valid only during the call.
func scanBackward(r io.ReaderAt, size int64, fn func(line []byte, end int64) bool) error {
	buf := make([]byte, scanChunk)
	var carry []byte // the end of a line whose start lies before pos
	end := size
	pos := size
	for pos > 0 {
		n := min(int64(scanChunk), pos)
		pos -= n
		if _, err := r.ReadAt(buf[:n], pos); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		chunk := buf[:n]
		for {
			i := bytes.LastIndexByte(chunk, '\n')
			if i < 0 {
				carry = append(append(make([]byte, 0, len(chunk)+len(carry)), chunk...), carry...)
				break
			}
			line := chunk[i+1:]
			if len(carry) > 0 {
				line = append(append(make([]byte, 0, len(line)+len(carry)), line...), carry...)
				carry = carry[:0]
			}
			// A final '\n' ends the last line rather than starting an empty one.
			if !(len(line) == 0 && end == size) && !fn(line, end) {
				return nil
			}
			end = pos + int64(i) + 1
			chunk = chunk[:i]
		}
	}
	if len(carry) > 0 {
		fn(carry, end)
	}
	return nil
}
