package topology

import (
	"fmt"
	"strings"
)

// expand replaces ${VAR} and ${VAR:-default} in s and turns $$ into $. As
// in the shell, the default applies when VAR is unset or empty. A $ followed
// by anything else is kept as is.
//
// refs reports whether s referenced any variable, in which case out may
// hold a secret and must not appear in messages. problems never contain a
// variable's value; unset lists the variables that are not set, whose
// problems are among them.
func expand(s string, lookup func(string) (string, bool)) (out string, refs bool, problems, unset []string) {
	if !strings.Contains(s, "$") {
		return s, false, nil, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' {
			b.WriteByte(s[i])
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i += 2
			continue
		}
		if i+1 >= len(s) || s[i+1] != '{' {
			b.WriteByte('$')
			i++
			continue
		}
		refs = true
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			problems = append(problems, "unterminated ${ (write $$ for a literal $)")
			break
		}
		expr := s[i+2 : i+2+end]
		i += 2 + end + 1
		name, def, hasDef := strings.Cut(expr, ":-")
		if !isEnvName(name) {
			problems = append(problems, fmt.Sprintf("invalid environment variable reference %q (want ${NAME} or ${NAME:-default})", truncate("${"+expr+"}")))
			continue
		}
		v, ok := lookup(name)
		switch {
		case ok && (v != "" || !hasDef):
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			problems = append(problems, fmt.Sprintf("environment variable %q is not set", name))
			unset = append(unset, name)
		}
	}
	return b.String(), refs, problems, unset
}

// isEnvName reports whether s is a portable environment variable name.
func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// truncate shortens s for a message.
func truncate(s string) string {
	const max = 64
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max]) + "..."
}
