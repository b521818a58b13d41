package topology

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
)

// BrokersEnv names the environment variable that, when set and non-empty,
// replaces kafka.brokers: a comma-separated list of host:port.
const BrokersEnv = "EXACTLY_BROKERS"

// Load reads the topology file at path and parses it with the process
// environment. See Parse.
func Load(path string) (*File, error) {
	f, err := LoadDraft(path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Parse decodes, expands, defaults and validates a topology file. name is
// used in messages and as File.Path; lookupEnv resolves ${VAR} references
// and EXACTLY_BROKERS (nil means no variable is set).
//
// On failure it returns a nil *File and an Errors holding every problem
// found, sorted by position. Parse does not touch the network and does not
// panic, whatever data holds.
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	f, err := ParseDraft(name, data, lookupEnv)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// LoadDraft is Load that, on failure, also returns the file as far as it
// decoded (see ParseDraft).
func LoadDraft(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load topology: %w", err)
	}
	return ParseDraft(path, data, os.LookupEnv)
}

// LoadOffline is LoadDraft for checking a file where it will not run
// (exactly validate, CI): it needs none of the secrets the file refers
// to. A ${VAR} that is not set leaves its value unknown, and the checks of
// that value to the process that runs the file, which reports it unset; a
// connection string from the environment is not parsed, nor are AWS
// credentials looked for.
func LoadOffline(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load topology: %w", err)
	}
	return parse(path, data, os.LookupEnv, true)
}

// ParseDraft is Parse that, on failure, also returns the file as far as it
// decoded, when it decoded at all (nil for a YAML syntax error or a file
// that is not a mapping), so that checks made outside this package (the
// CEL of transform steps) can report their problems with the file's own in
// one run. Such a draft is for checking only: it may hold zero values where
// a problem was, and Problem says where one was reported.
func ParseDraft(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	return parse(name, data, lookupEnv, false)
}

// parse is ParseDraft, offline (see LoadOffline) or not.
func parse(name string, data []byte, lookupEnv func(string) (string, bool), offline bool) (*File, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	d := newDecoder(name, lookupEnv)
	d.offline = offline
	root := d.root(data)
	if root == nil {
		return nil, d.errs.sorted()
	}
	f := &File{Path: name}
	d.decode(root, reflect.ValueOf(f).Elem(), "")
	f.pos = d.pos

	v := &validator{d: d, f: f}
	v.overrideBrokers()
	v.defaults()
	v.validate()
	if len(d.errs) > 0 {
		f.problems = make(map[string]bool, len(d.errs))
		for _, e := range d.errs {
			f.problems[e.Path] = true
		}
		return f, d.errs.sorted()
	}
	v.resolveKafkaFiles()
	f.warnings = f.warnings.sorted()
	return f, nil
}

// validator checks a decoded File. It reports through the decoder so that
// decode and validation problems end up in one list.
type validator struct {
	d            *decoder
	f            *File
	brokersByEnv bool
	changelogs   map[string]changelogUser // changelog topic -> the first step that has it
}

// has reports whether path was written in the file with a non-null value.
func (v *validator) has(path string) bool {
	_, ok := v.d.pos[path]
	return ok && !v.d.null[path]
}

// at returns the position of path, or of its nearest written ancestor: a
// missing field is reported at the mapping that lacks it.
func (v *validator) at(path string) Position {
	for {
		if p, ok := v.d.pos[path]; ok {
			return p
		}
		if path == "" {
			return Position{}
		}
		path = parent(path)
	}
}

// report records a problem at path unless decoding already failed there or
// above: one cause, one message.
func (v *validator) report(path, format string, args ...any) {
	for p := path; ; p = parent(p) {
		if v.d.failed[p] {
			return
		}
		if p == "" {
			break
		}
	}
	v.d.add(v.at(path), path, format, args...)
}

// q quotes the value at path for a message, showing the source text instead
// when the value came from the environment.
func (v *validator) q(path, val string) string {
	if src, ok := v.d.src[path]; ok {
		return shown(src, true)
	}
	return strconv.Quote(truncate(val))
}

// num is like q for numbers and durations, which read better unquoted.
func (v *validator) num(path, val string) string {
	if src, ok := v.d.src[path]; ok {
		return shown(src, true)
	}
	return val
}

// name is like q without quotes, for lists such as cycles.
func (v *validator) name(path, val string) string {
	if src, ok := v.d.src[path]; ok {
		return src
	}
	if val == "" {
		return parent(path)
	}
	return val
}
