package transform

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runningSum adds value.n to the sum of the record key and writes the
// sum, emitting nothing when n is 0.
func runningSum(_ context.Context, r Record, st Store) ([]Record, error) {
	v, _ := r.Value.(map[string]any)
	n, ok := v["n"].(int64)
	if !ok {
		return nil, errors.New("n is not an integer")
	}
	cur, _, err := st.Get(r.Key)
	if err != nil {
		return nil, err
	}
	sum, _ := strconv.ParseInt(string(cur), 10, 64)
	if n == 0 {
		return nil, nil
	}
	sum += n
	if err := st.Put(r.Key, strconv.AppendInt(nil, sum, 10)); err != nil {
		return nil, err
	}
	r.Value = map[string]any{"sum": sum}
	return []Record{r}, nil
}

func TestStatefulStep(t *testing.T) {
	reg := NewRegistry()
	if err := reg.RegisterStateful("sum", runningSum); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, steps, store string
		index              int
	}{
		{name: "scalar", steps: "      - stateful: sum\n", store: "sum"},
		{name: "mapping", steps: "      - filter: has(value.n)\n      - stateful: { func: sum, store: balances }\n", store: "balances", index: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := compileSteps(t, tc.steps, reg)
			if err != nil {
				t.Fatal(err)
			}
			sf := p.Stateful()
			if sf == nil || sf.Store != tc.store || sf.Index != tc.index || sf.Step != "transform["+strconv.Itoa(tc.index)+"] stateful" {
				t.Fatalf("Stateful() = %+v", sf)
			}
			if !p.HasFuncs() {
				t.Fatal("HasFuncs() = false: a stateful step gets no deadline")
			}
			st := MemStore{}
			ctx := WithStore(context.Background(), st)
			var sums []string
			for _, n := range []int{3, 0, 4, 5} {
				out, err := p.Apply(ctx, Record{Key: []byte("k"), Value: map[string]any{"n": int64(n)}})
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range out {
					sums = append(sums, strconv.FormatInt(o.Value.(map[string]any)["sum"].(int64), 10))
				}
			}
			if got := strings.Join(sums, ","); got != "3,7,12" || string(st["k"]) != "12" {
				t.Fatalf("sums %s, store %v; want 3,7,12 and k=12", got, st)
			}
			_, err = p.Apply(ctx, Record{Key: []byte("k"), Value: map[string]any{"n": "x"}})
			var se *StepError
			if !errors.As(err, &se) || se.Step != sf.Step || !strings.Contains(err.Error(), "n is not an integer") {
				t.Fatalf("a failing function: %v, want a StepError of %s", err, sf.Step)
			}
			if _, err := p.Apply(context.Background(), Record{Key: []byte("k"), Value: map[string]any{"n": int64(1)}}); !errors.Is(err, ErrNoStore) {
				t.Fatalf("Apply without a store: %v, want ErrNoStore", err)
			}
		})
	}
}

// TestStatefulStore: the store a function gets refuses empty keys, and
// every call once the step has returned, also from a call abandoned at its
// deadline, which must not change the state after it.
func TestStatefulStore(t *testing.T) {
	reg := NewRegistry()
	var kept Store
	release, done := make(chan struct{}), make(chan error, 1)
	for name, fn := range map[string]StatefulFunc{
		"empty-key": func(_ context.Context, r Record, st Store) ([]Record, error) {
			if _, _, err := st.Get(nil); !errors.Is(err, ErrEmptyKey) {
				return nil, errors.New("Get of an empty key: no ErrEmptyKey")
			}
			if err := st.Put([]byte{}, []byte("x")); !errors.Is(err, ErrEmptyKey) {
				return nil, errors.New("Put of an empty key: no ErrEmptyKey")
			}
			return []Record{r}, st.Delete(nil)
		},
		"keep": func(_ context.Context, r Record, st Store) ([]Record, error) {
			kept = st
			return []Record{r}, nil
		},
		"stuck": func(_ context.Context, r Record, st Store) ([]Record, error) {
			<-release // past the deadline
			done <- st.Put([]byte("late"), []byte("x"))
			return []Record{r}, nil
		},
	} {
		if err := reg.RegisterStateful(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(name string, timeout time.Duration) (MemStore, error) {
		t.Helper()
		p, err := compileSteps(t, "      - stateful: "+name+"\n", reg)
		if err != nil {
			t.Fatal(err)
		}
		st := MemStore{}
		ctx, cancel := context.WithTimeout(WithStore(context.Background(), st), timeout)
		defer cancel()
		_, err = p.Apply(ctx, Record{Key: []byte("k"), Value: map[string]any{}})
		return st, err
	}

	if _, err := apply("empty-key", time.Minute); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("empty-key: %v, want ErrEmptyKey", err)
	}
	if _, err := apply("keep", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := kept.Put([]byte("a"), nil); !errors.Is(err, ErrStoreClosed) {
		t.Errorf("Put after the call returned: %v, want ErrStoreClosed", err)
	}
	st, err := apply("stuck", 20*time.Millisecond)
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("stuck: %v, want ErrTimedOut", err)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrStoreClosed) || len(st) != 0 {
		t.Fatalf("abandoned call's Put: %v, store %v; want ErrStoreClosed and no change", err, st)
	}
}

func TestRegisterStateful(t *testing.T) {
	reg := NewRegistry()
	noop := func(context.Context, Record) ([]Record, error) { return nil, nil }
	if err := reg.Register("plain", noop); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterStateful("sum", runningSum); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"stateful over a func":  reg.RegisterStateful("plain", runningSum),
		"func over a stateful":  reg.Register("sum", noop),
		"stateful twice":        reg.RegisterStateful("sum", runningSum),
		"nil stateful function": reg.RegisterStateful("other", nil),
		"empty name":            reg.RegisterStateful("", runningSum),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if got := reg.StatefulNames(); len(got) != 1 || got[0] != "sum" {
		t.Errorf("StatefulNames() = %v", got)
	}
	if got := reg.Names(); len(got) != 1 || got[0] != "plain" {
		t.Errorf("Names() = %v", got)
	}

	for _, tc := range []struct{ name, steps, want string }{
		{"unknown", "      - stateful: nope\n",
			`t.yaml:15:19: stages[0].transform[0].stateful: no stateful Go transform is registered as "nope" (registered with transform.RegisterStateful: sum)`},
		{"unknown, mapping", "      - stateful: { func: nope, store: s }\n",
			`t.yaml:15:27: stages[0].transform[0].stateful.func: no stateful Go transform is registered as "nope" (registered with transform.RegisterStateful: sum)`},
		{"a func as stateful", "      - stateful: plain\n",
			`t.yaml:15:19: stages[0].transform[0].stateful: no stateful Go transform is registered as "plain" ("plain" is a stateless transform: call it with func: plain) (registered with transform.RegisterStateful: sum)`},
		{"a stateful as func", "      - func: sum\n",
			`t.yaml:15:15: stages[0].transform[0].func: no Go transform is registered as "sum" ("sum" is a stateful transform: call it with stateful: sum) (registered: plain)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileSteps(t, tc.steps, reg)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Compile error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}
