package plural

import "testing"

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		one  string
		many []string
		want string
	}{
		{0, "stage", nil, "0 stages"},
		{1, "stage", nil, "1 stage"},
		{2, "stage", nil, "2 stages"},
		{-1, "stage", nil, "-1 stage"},
		{1, "transform step", nil, "1 transform step"},
		{1, "entry", []string{"entries"}, "1 entry"},
		{3, "entry", []string{"entries"}, "3 entries"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			if got := Count(tt.n, tt.one, tt.many...); got != tt.want {
				t.Errorf("Count(%d, %q, %q) = %q, want %q", tt.n, tt.one, tt.many, got, tt.want)
			}
		})
	}
}
