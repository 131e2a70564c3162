package logrotate

import (
	"reflect"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	const log = "/pods/ns_p_uid/c/0.log"
	now := time.Date(2026, 11, 28, 18, 5, 9, 0, time.UTC)
	next := log + ".20261128-180509"
	r := func(suffix string) string { return log + "." + suffix }
	five := Policy{MaxSize: 10 << 20, MaxFiles: 5}
	for _, tc := range []struct {
		name    string
		size    int64
		rotated []string
		policy  Policy
		want    Actions
	}{
		{
			name: "below the size: nothing, leftovers included", size: 10<<20 - 1,
			rotated: []string{r("20261128-170000.gz.tmp")}, policy: five,
		},
		{
			name: "at the size, first rotation: renamed with the time", size: 10 << 20,
			policy: five, want: Actions{RotateTo: next},
		},
		{
			name: "the newest rotated file is compressed, the one being rotated stays plain", size: 11 << 20,
			rotated: []string{r("20261128-170000")}, policy: five,
			want: Actions{Compress: []string{r("20261128-170000")}, RotateTo: next},
		},
		{
			name: "MaxFiles 5 keeps three rotated files before rotating: the oldest removed", size: 10 << 20,
			rotated: []string{r("20261128-170003"), r("20261128-170001.gz"), r("20261128-170000.gz"), r("20261128-170002.gz")},
			policy:  five,
			want: Actions{
				Remove:   []string{r("20261128-170000.gz")},
				Compress: []string{r("20261128-170003")},
				RotateTo: next,
			},
		},
		{
			name: "MaxFiles 2: every rotated file goes, only the one rotated now stays", size: 10 << 20,
			rotated: []string{r("20261128-170001"), r("20261128-170000.gz")},
			policy:  Policy{MaxSize: 10 << 20, MaxFiles: 2},
			want:    Actions{Remove: []string{r("20261128-170000.gz"), r("20261128-170001")}, RotateTo: next},
		},
		{
			name: "leftovers of an interrupted compression: the temporary file, and a plain file whose .gz exists", size: 10 << 20,
			rotated: []string{r("20261128-170000"), r("20261128-170000.gz"), r("20261128-170001.tmp"), r("20261128-170001")},
			policy:  five,
			want: Actions{
				Remove:   []string{r("20261128-170000"), r("20261128-170001.tmp")},
				Compress: []string{r("20261128-170001")},
				RotateTo: next,
			},
		},
		{
			name: "a rotated file of this second exists: no rotation this round, nothing renamed over it", size: 10 << 20,
			rotated: []string{next}, policy: five,
			want: Actions{Compress: []string{next}},
		},
		{
			name: "its compressed copy exists: the same", size: 10 << 20,
			rotated: []string{next + ".gz"}, policy: five,
		},
		{
			name: "negative MaxSize: rotation off", size: 1 << 40,
			rotated: []string{r("20261128-170000.tmp")}, policy: Policy{MaxSize: -1, MaxFiles: 5},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Plan(log, tc.size, tc.rotated, now, tc.policy)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Plan = %+v\nwant  %+v", got, tc.want)
			}
		})
	}
}
